// What the daemon records for its state file (package statefile's schema)
// between writes: the daemon-wide report
// (reloads, the last scan, change and error, a failure to save the
// original values, the udev warning) and what a pass leaves of one disk.
// It holds no lock: the daemon keeps the report under the lock of its
// disks, so that one snapshot is one view of both.

package daemon

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// Report is the daemon-wide part of the state.
type Report struct {
	Policy     *policy.Policy
	Reloads    []statefile.Reload // the last KeptReloads, newest last
	Scan       *statefile.Scan
	LastChange *statefile.Change
	LastError  *statefile.Problem
	// reloadError is LastError's value when it was a failed reload: a
	// valid reload since clears it.
	reloadError *statefile.Problem
	// Persistence is the last failure to save the original values,
	// until a save succeeds.
	Persistence *statefile.Problem
	UdevWarning string
}

// KeptReloads is how many reloads the state file lists: enough for the
// `iosched reload`s waiting at once to each find its own.
const KeptReloads = 16

// LastReload is the newest reload, nil before the first.
func (r *Report) LastReload() *statefile.Reload {
	if len(r.Reloads) == 0 {
		return nil
	}
	return &r.Reloads[len(r.Reloads)-1]
}

// Reloaded records a reload, taken (ok) or refused for errs, asked for by
// requests.
func (r *Report) Reloaded(ok bool, errs, requests []string) {
	seq := 1
	if last := r.LastReload(); last != nil {
		seq = last.Seq + 1
	}
	r.Reloads = append(r.Reloads, statefile.Reload{Seq: seq, At: time.Now(), OK: ok, Requests: requests, Errors: errs, Done: !ok})
	if n := len(r.Reloads); n > KeptReloads {
		r.Reloads = slices.Delete(r.Reloads, 0, n-KeptReloads)
	}
	switch {
	case !ok:
		r.LastError = &statefile.Problem{At: time.Now(), Message: "policy reload failed: " + strings.Join(errs, "; ")}
		r.reloadError = r.LastError
	case r.LastError == r.reloadError:
		r.LastError = nil // the policy it was about is gone
	}
}

// Replanned marks the reloads done: every disk re-planned under the last.
func (r *Report) Replanned() {
	for i := range r.Reloads {
		r.Reloads[i].Done = true
	}
}

// Persisted records whether saving the original values worked: a failure
// shows until a save succeeds.
func (r *Report) Persisted(err error) {
	if err != nil {
		p := &statefile.Problem{At: time.Now(), Message: "saving the original values: " + err.Error()}
		r.Persistence, r.LastError = p, p
		return
	}
	if r.LastError == r.Persistence {
		r.LastError = nil
	}
	r.Persistence = nil
}

// Fill sets the daemon-wide fields of st, but for its policy's.
func (r *Report) Fill(st *statefile.State) {
	st.Reloads = slices.Clone(r.Reloads) // marshalled after the daemon's lock
	st.LastScan = r.Scan
	st.LastChange = r.LastChange
	st.LastError = r.LastError
	st.PersistenceError = r.Persistence
	if last := r.LastReload(); last != nil {
		l := *last
		st.LastReload = &l
	}
	if r.UdevWarning != "" {
		st.Warnings = append(st.Warnings, r.UdevWarning)
	}
}

// StatusLine is the one-line STATUS= systemd shows, with managed disks.
func (r *Report) StatusLine(managed int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "STATUS=%d disks managed", managed)
	if c := r.LastChange; c != nil {
		fmt.Fprintf(&b, "; last change %s %s %s %s->%s", c.At.Format(time.TimeOnly), c.Device, c.Attribute, c.From, c.To)
	}
	if last := r.LastReload(); last != nil && !last.OK {
		fmt.Fprintf(&b, "; policy reload FAILED at %s, previous policy in force", last.At.Format(time.TimeOnly))
	}
	if e := r.LastError; e != nil {
		msg := e.Message
		if e.Device != "" {
			msg = e.Device + ": " + msg
		}
		fmt.Fprintf(&b, "; last error %s %s", e.At.Format(time.TimeOnly), firstLine(msg))
	}
	if r.UdevWarning != "" {
		b.WriteString("; WARNING no udevd runs")
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// AfterPass is a disk's state after a pass that read it as dev, evaluated
// ev, planned p and applied it with res; refused are the writes the kernel
// refused, not retried yet. failed are the pass's failures, for
// Report.SettleDisk.
func AfterPass(dev *sysfs.Device, ev policy.Evaluation, p plan.Plan, res apply.Result, refused []statefile.Refusal) (st statefile.DiskState, failed []string) {
	st = statefile.DiskState{Class: dev.Class, Rules: ev.Matched, Settings: Applied(dev, ev, p), Skipped: p.Skipped, Errors: dev.Errors}
	failed = slices.Clone(p.Errors)
	for _, o := range res.Outcomes {
		if o.Status == apply.Failed || o.Status == apply.Mismatch {
			failed = append(failed, fmt.Sprintf("%s: %v", o.Attribute, o.Err))
		}
	}
	st.Refused = append(st.Refused, refused...)
	if len(st.Refused) > 1 {
		sort.Slice(st.Refused, func(i, j int) bool { return st.Refused[i].Attribute < st.Refused[j].Attribute })
	}
	return st, failed
}

// SettleDisk gives st, the state a pass leaves on disk name (from
// AfterPass), its last error against old, the state before: a failure
// repeated is not news, one new is the daemon's last error too.
func (r *Report) SettleDisk(name string, old statefile.DiskState, st *statefile.DiskState, failed []string) {
	switch {
	case len(failed) > 0:
		msg := strings.Join(failed, "; ")
		st.LastError = &statefile.Problem{At: time.Now(), Message: msg}
		if old.LastError != nil && old.LastError.Message == msg {
			st.LastError = old.LastError // the same failure: not news
		} else {
			r.LastError = &statefile.Problem{At: st.LastError.At, Device: name, Message: msg}
		}
	case len(st.Refused) > 0:
		st.LastError = old.LastError // a refused write, not retried yet
	}
}

// Current is the value dev has for attr, "" when unknown.
func Current(dev *sysfs.Device, attr string) string {
	v, _ := dev.Value(sysfs.Attr(attr))
	return v
}

// Applied lists the settings ev makes on dev, with the values dev shows
// after p was applied. Want is what p wrote where dev shows another value:
// the plan chose it (the scheduler: the first candidate the disk offers).
// A setting p did not write was in place, or could not be planned (the
// disk's error says why).
func Applied(dev *sysfs.Device, ev policy.Evaluation, p plan.Plan) []statefile.Applied {
	skipped := map[string]bool{}
	for _, s := range p.Skipped {
		skipped[s.Attribute] = true
	}
	wants := map[string]string{}
	for _, c := range p.Changes {
		wants[c.Attribute] = c.To
	}
	out := []statefile.Applied{}
	for _, s := range ev.Settings {
		if skipped[s.Attribute] {
			continue
		}
		a := statefile.Applied{Attribute: s.Attribute, Value: Current(dev, s.Attribute), Rule: s.Rule}
		if want, ok := wants[s.Attribute]; ok && a.Value != want {
			a.Want = want
		}
		out = append(out, a)
	}
	return out
}

// ErrorLines splits a policy error into its lines, one problem each.
func ErrorLines(err error) []string {
	var pe policy.Errors
	if errors.As(err, &pe) {
		out := make([]string, len(pe))
		for i, e := range pe {
			out[i] = e.Error()
		}
		return out
	}
	return strings.Split(err.Error(), "\n")
}
