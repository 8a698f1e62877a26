package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/internal/atomicfile"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/originals"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

// This file records what the daemon does, for the state file `iosched
// status` reads (its schema is package statefile) and the log.

// report is the daemon-wide part of the state, under Daemon.mu.
type report struct {
	policy     *policy.Policy
	reloads    []statefile.Reload // the last keptReloads, newest last
	scan       *statefile.Scan
	lastChange *statefile.Change
	lastError  *statefile.Problem
	// reloadError is lastError's value when it was a failed reload: a
	// valid reload since clears it.
	reloadError *statefile.Problem
	// persistence is the last failure to save the original values,
	// until a save succeeds.
	persistence *statefile.Problem
	udevWarning string
}

// lastReload is the newest reload, nil before the first.
func (r *report) lastReload() *statefile.Reload {
	if len(r.reloads) == 0 {
		return nil
	}
	return &r.reloads[len(r.reloads)-1]
}

// keptReloads is how many reloads the state file lists: enough for the
// `iosched reload`s waiting at once to each find its own.
const keptReloads = 16

// noteDisk records what a pass left on a disk and logs what a user must
// know once: settings the disk cannot take, attributes it could not read.
func (d *Daemon) noteDisk(name string, rec *disk, dev *sysfs.Device, ev policy.Evaluation, p plan.Device, res apply.Result) {
	st := statefile.DiskState{Class: dev.Class, Rules: ev.Matched, Settings: applied(dev, ev, p), Skipped: p.Skipped, Errors: dev.Errors}
	failed := slices.Clone(p.Errors)
	for _, o := range res.Outcomes {
		if o.Status == apply.Failed || o.Status == apply.Mismatch {
			failed = append(failed, fmt.Sprintf("%s: %v", o.Attribute, o.Err))
		}
	}
	for _, r := range rec.refused {
		st.Refused = append(st.Refused, r.Refusal)
	}
	if len(st.Refused) > 1 {
		sort.Slice(st.Refused, func(i, j int) bool { return st.Refused[i].Attribute < st.Refused[j].Attribute })
	}

	d.mu.Lock()
	old := rec.state
	switch {
	case len(failed) > 0:
		msg := strings.Join(failed, "; ")
		st.LastError = &statefile.Problem{At: time.Now(), Message: msg}
		if old.LastError != nil && old.LastError.Message == msg {
			st.LastError = old.LastError // the same failure: not news
		} else {
			d.report.lastError = &statefile.Problem{At: st.LastError.At, Device: name, Message: msg}
		}
	case len(st.Refused) > 0:
		st.LastError = old.LastError // a refused write, not retried yet
	}
	rec.state = st
	d.mu.Unlock()

	if !reflect.DeepEqual(old.Skipped, st.Skipped) {
		for _, s := range st.Skipped {
			d.log.Info("setting not made", "device", name, "attribute", s.Attribute, "reason", s.Reason, "rule", s.Rule)
		}
	}
	if len(p.Errors) > 0 && (old.LastError == nil || old.LastError.Message != st.LastError.Message) {
		for _, e := range p.Errors {
			d.log.Error("setting not planned", "device", name, "error", e)
		}
	}
	if !slices.Equal(old.Errors, st.Errors) {
		for _, e := range st.Errors {
			d.log.Warn("attribute unreadable", "device", name, "error", e)
		}
	}
	if !reflect.DeepEqual(old, st) {
		d.markChanged()
	}
}

// noteError records a pass that could not read its disk.
func (d *Daemon) noteError(name string, rec *disk, msg string) {
	d.mu.Lock()
	changed := rec.state.LastError == nil || rec.state.LastError.Message != msg
	p := &statefile.Problem{At: time.Now(), Message: msg}
	rec.state.LastError = p
	d.report.lastError = &statefile.Problem{At: p.At, Device: name, Message: msg}
	d.mu.Unlock()
	if changed {
		d.log.Error("reading disk", "device", name, "error", msg)
	}
	d.markChanged()
}

// noteHeld records that another process holds the disk's lock, so the
// pass wrote nothing: status says why the disk is not managed, and the log
// says it once, when it begins. The record stays until a pass that may
// write the disk (noteDisk replaces the disk's state).
func (d *Daemon) noteHeld(name string, rec *disk, err error) {
	d.mu.Lock()
	first := rec.state.Held == nil
	if first {
		rec.state.Held = &statefile.Problem{At: time.Now(), Message: err.Error()}
	}
	d.mu.Unlock()
	if first {
		d.log.Warn("not written: another process holds the disk's lock; retried at its next pass", "device", name, "error", err)
		d.markChanged()
	}
}

func (d *Daemon) noteChange(c statefile.Change) {
	d.mu.Lock()
	d.report.lastChange = &c
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteReload(ok bool, errs, requests []string) {
	d.mu.Lock()
	seq := 1
	if r := d.report.lastReload(); r != nil {
		seq = r.Seq + 1
	}
	d.report.reloads = append(d.report.reloads, statefile.Reload{Seq: seq, At: time.Now(), OK: ok, Requests: requests, Errors: errs, Done: !ok})
	if n := len(d.report.reloads); n > keptReloads {
		d.report.reloads = slices.Delete(d.report.reloads, 0, n-keptReloads)
	}
	switch {
	case !ok:
		d.report.lastError = &statefile.Problem{At: time.Now(), Message: "policy reload failed: " + strings.Join(errs, "; ")}
		d.report.reloadError = d.report.lastError
	case d.report.lastError == d.report.reloadError:
		d.report.lastError = nil // the policy it was about is gone
	}
	d.mu.Unlock()
	d.markChanged()
}

// noteReplanned marks the reloads done: every disk re-planned under the
// last.
func (d *Daemon) noteReplanned() {
	d.mu.Lock()
	for i := range d.report.reloads {
		d.report.reloads[i].Done = true
	}
	d.mu.Unlock()
	d.markChanged()
}

// notePersistence records whether saving the original values worked: a
// failure shows in the state until a save succeeds.
func (d *Daemon) notePersistence(err error) {
	if err == nil && !d.persistFailed.Load() {
		return // the common case, without the lock
	}
	d.mu.Lock()
	if err != nil {
		p := &statefile.Problem{At: time.Now(), Message: "saving the original values: " + err.Error()}
		d.report.persistence, d.report.lastError = p, p
		d.persistFailed.Store(true)
	} else {
		if d.report.lastError == d.report.persistence {
			d.report.lastError = nil
		}
		d.report.persistence = nil
		d.persistFailed.Store(false)
	}
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteScan(r scanResult) {
	d.mu.Lock()
	d.report.scan = &statefile.Scan{At: time.Now(), Reason: r.reason, Disks: r.disks, Writes: r.writes, Seconds: r.took.Seconds()}
	d.mu.Unlock()
	lvl := d.log.Info
	if r.reason == "reconcile" && r.writes == 0 {
		lvl = d.log.Debug // the timer's: nothing to say when nothing drifted
	}
	lvl("scan done", "reason", r.reason, "disks", r.disks, "writes", r.writes, "took", r.took.Round(time.Microsecond))
	d.markChanged()
}

// current is the value dev has for attr, "" when unknown.
func current(dev *sysfs.Device, attr string) string {
	v, _ := dev.Value(sysfs.Attr(attr))
	return v
}

// applied lists the settings ev makes on dev, with the values dev shows
// after p was applied. Want is what p wrote where dev shows another value:
// the plan chose it (the scheduler: the first candidate the disk offers).
// A setting p did not write was in place, or could not be planned (the
// disk's error says why).
func applied(dev *sysfs.Device, ev policy.Evaluation, p plan.Device) []statefile.Applied {
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
		a := statefile.Applied{Attribute: s.Attribute, Value: current(dev, s.Attribute), Rule: s.Rule}
		if want, ok := wants[s.Attribute]; ok && a.Value != want {
			a.Want = want
		}
		out = append(out, a)
	}
	return out
}

func (d *Daemon) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.disks)
}

// snapshot assembles the state file's contents.
func (d *Daemon) snapshot() *statefile.State {
	unknown := d.orig.UnknownDisks()
	aside, _ := originals.Aside(d.cfg.StateDir) // a glob: none when it fails
	inFlight := d.inFlight.All()
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &statefile.State{
		PID:              os.Getpid(),
		ProcStart:        statefile.StartTime(os.Getpid()),
		Exe:              d.exe,
		Started:          d.started,
		Updated:          time.Now(),
		Reloads:          slices.Clone(d.report.reloads), // marshalled after the lock
		LastScan:         d.report.scan,
		LastChange:       d.report.lastChange,
		LastError:        d.report.lastError,
		PersistenceError: d.report.persistence,
		OriginalsUnknown: unknown,
		OriginalsAside:   aside,
		Disks:            make(map[string]*statefile.DiskState, len(d.disks)),
	}
	if r := d.report.lastReload(); r != nil {
		last := *r
		st.LastReload = &last
	}
	if d.report.udevWarning != "" {
		st.Warnings = append(st.Warnings, d.report.udevWarning)
	}
	if p := d.report.policy; p != nil {
		st.Policy = statefile.PolicyState{Sources: p.Sources, UeventSource: d.ueventSource(p), ReconcileInterval: p.Daemon.ReconcileInterval.String(), RestoreOnExit: p.Daemon.RestoreOnExit}
	}
	st.LastBurst = d.burstState()
	st.Metrics = d.metricsState()
	st.PolicyFollowed = d.policyFollowed.Load()
	d.metrics.SetDisks(diskKinds(d.disks))
	for name, rec := range d.disks {
		s := rec.state
		s.Probe = d.probes.state(name)
		st.Disks[name] = &s
		if len(s.Rules) > 0 {
			st.Managed++
		}
	}
	for _, w := range inFlight {
		s := st.Disks[w.Disk]
		if s == nil { // forgotten (gone, or renamed) with its write still in the kernel
			s = &statefile.DiskState{}
			st.Disks[w.Disk] = s
		}
		s.InFlight = append(s.InFlight, statefile.InFlight{What: w.What, Since: w.Since})
	}
	return st
}

// writeState replaces state.json whole: readers see the old file or the
// new one, never half of one.
func (d *Daemon) writeState() error {
	b, err := json.Marshal(d.snapshot())
	if err != nil {
		return err
	}
	return atomicfile.Write(statefile.Path(d.cfg.RuntimeDir), b)
}

// errorLines splits a policy error into its lines, one problem each.
func errorLines(err error) []string {
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
