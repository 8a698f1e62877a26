package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

// State is what state.json holds: the daemon as `iosched status` shows it.
type State struct {
	PID int `json:"pid"`
	// ProcStart is the process's start time in clock ticks since boot
	// (/proc/PID/stat field 22), so a recycled pid is not taken for the
	// daemon.
	ProcStart  uint64      `json:"proc_start,omitempty"`
	Started    time.Time   `json:"started"`
	Updated    time.Time   `json:"updated"`
	Policy     PolicyState `json:"policy"`
	LastReload *Reload     `json:"last_reload,omitempty"`
	LastScan   *Scan       `json:"last_scan,omitempty"`
	LastChange *Change     `json:"last_change,omitempty"`
	LastError  *Problem    `json:"last_error,omitempty"`
	// Managed counts the disks at least one rule matched.
	Managed int                   `json:"managed"`
	Disks   map[string]*DiskState `json:"disks"`
}

// PolicyState is the policy in force.
type PolicyState struct {
	Sources           []string `json:"sources"`
	UeventSource      string   `json:"uevent_source"`
	ReconcileInterval string   `json:"reconcile_interval"`
	RestoreOnExit     bool     `json:"restore_on_exit"`
}

// Reload is the outcome of the last SIGHUP.
type Reload struct {
	// Seq counts the SIGHUPs taken since start: `iosched reload` waits
	// for it to pass the value it saw before signalling.
	Seq    int       `json:"seq"`
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	Errors []string  `json:"errors,omitempty"`
	// Done: an invalid policy was refused, or a valid one has re-planned
	// every disk (READY=1 was sent).
	Done bool `json:"done"`
}

// Scan is the last pass over every disk.
type Scan struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Disks  int       `json:"disks"`
	Writes int64     `json:"writes"`
	// Seconds is how long it took, to the microsecond.
	Seconds float64 `json:"seconds"`
}

// Change is one attribute the daemon wrote.
type Change struct {
	At        time.Time `json:"at"`
	Device    string    `json:"device"`
	Attribute string    `json:"attribute"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Rule      string    `json:"rule"`
	// Drift: it had been set and someone changed it back.
	Drift bool `json:"drift,omitempty"`
}

// Problem is an error and when it happened.
type Problem struct {
	At      time.Time `json:"at"`
	Device  string    `json:"device,omitempty"`
	Message string    `json:"message"`
}

// DiskState is one disk as the daemon last left it.
type DiskState struct {
	Class    sysfs.Class `json:"class"`
	Rules    []string    `json:"rules"`
	Settings []Applied   `json:"settings"`
	Skipped  []plan.Skip `json:"skipped,omitempty"`
	// Errors are attributes that could not be read.
	Errors    []string `json:"errors,omitempty"`
	LastError *Problem `json:"last_error,omitempty"`
}

// Applied is one setting the policy makes on a disk.
type Applied struct {
	Attribute string `json:"attribute"`
	Value     string `json:"value"`
	// Want is set when the value is not (yet) what the policy asks.
	Want string `json:"want,omitempty"`
	Rule string `json:"rule"`
}

// report is the daemon-wide part of the state, under Daemon.mu.
type report struct {
	policy     *policy.Policy
	reload     *Reload
	scan       *Scan
	lastChange *Change
	lastError  *Problem
	// reloadError is lastError's value when it was a failed reload: a
	// valid reload since clears it.
	reloadError *Problem
}

// noteDisk records what a pass left on a disk and logs what a user must
// know once: settings the disk cannot take, attributes it could not read.
func (d *Daemon) noteDisk(name string, rec *disk, dev *sysfs.Device, ev policy.Evaluation, p plan.Device, res apply.Result) {
	st := DiskState{Class: dev.Class, Rules: ev.Matched, Settings: applied(dev, ev, p), Skipped: p.Skipped, Errors: dev.Errors}
	failed := slices.Clone(p.Errors)
	for _, o := range res.Outcomes {
		if o.Status == apply.Failed || o.Status == apply.Mismatch {
			failed = append(failed, fmt.Sprintf("%s: %v", o.Attribute, o.Err))
		}
	}
	if len(failed) > 0 {
		st.LastError = &Problem{At: time.Now(), Message: strings.Join(failed, "; ")}
	}

	d.mu.Lock()
	old := rec.state
	if st.LastError != nil {
		d.report.lastError = &Problem{At: st.LastError.At, Device: name, Message: st.LastError.Message}
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
	p := &Problem{At: time.Now(), Message: msg}
	rec.state.LastError = p
	d.report.lastError = &Problem{At: p.At, Device: name, Message: msg}
	d.mu.Unlock()
	if changed {
		d.log.Error("reading disk", "device", name, "error", msg)
	}
	d.markChanged()
}

func (d *Daemon) noteChange(c Change) {
	d.mu.Lock()
	d.report.lastChange = &c
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteReload(ok bool, errs []string) {
	d.mu.Lock()
	seq := 1
	if d.report.reload != nil {
		seq = d.report.reload.Seq + 1
	}
	d.report.reload = &Reload{Seq: seq, At: time.Now(), OK: ok, Errors: errs, Done: !ok}
	switch {
	case !ok:
		d.report.lastError = &Problem{At: time.Now(), Message: "policy reload failed: " + strings.Join(errs, "; ")}
		d.report.reloadError = d.report.lastError
	case d.report.lastError == d.report.reloadError:
		d.report.lastError = nil // the policy it was about is gone
	}
	d.mu.Unlock()
	d.markChanged()
}

// noteReplanned marks the last reload done: every disk re-planned under it.
func (d *Daemon) noteReplanned() {
	d.mu.Lock()
	if d.report.reload != nil {
		d.report.reload.Done = true
	}
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteScan(r scanResult) {
	d.mu.Lock()
	d.report.scan = &Scan{At: time.Now(), Reason: r.reason, Disks: r.disks, Writes: r.writes, Seconds: r.took.Seconds()}
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
func applied(dev *sysfs.Device, ev policy.Evaluation, p plan.Device) []Applied {
	skipped := map[string]bool{}
	for _, s := range p.Skipped {
		skipped[s.Attribute] = true
	}
	wants := map[string]string{}
	for _, c := range p.Changes {
		wants[c.Attribute] = c.To
	}
	out := []Applied{}
	for _, s := range ev.Settings {
		if skipped[s.Attribute] {
			continue
		}
		a := Applied{Attribute: s.Attribute, Value: current(dev, s.Attribute), Rule: s.Rule}
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
func (d *Daemon) snapshot() *State {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := &State{
		PID:        os.Getpid(),
		ProcStart:  procStart(os.Getpid()),
		Started:    d.started,
		Updated:    time.Now(),
		LastReload: d.report.reload,
		LastScan:   d.report.scan,
		LastChange: d.report.lastChange,
		LastError:  d.report.lastError,
		Disks:      make(map[string]*DiskState, len(d.disks)),
	}
	if p := d.report.policy; p != nil {
		st.Policy = PolicyState{Sources: p.Sources, UeventSource: d.ueventSource(p), ReconcileInterval: p.Daemon.ReconcileInterval.String(), RestoreOnExit: p.Daemon.RestoreOnExit}
	}
	for name, rec := range d.disks {
		s := rec.state
		st.Disks[name] = &s
		if len(s.Rules) > 0 {
			st.Managed++
		}
	}
	return st
}

// writeState replaces state.json atomically: readers see the old file or
// the new one, never half of one.
func (d *Daemon) writeState() {
	b, err := json.Marshal(d.snapshot())
	if err == nil {
		err = writeAtomic(statePath(d.cfg.RuntimeDir), b)
	}
	if err != nil {
		d.log.Error("writing the state file", "error", err)
	}
}

// statusLine is the one-line STATUS= systemd shows.
func (d *Daemon) statusLine() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	managed := 0
	for _, rec := range d.disks {
		if len(rec.state.Rules) > 0 {
			managed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "STATUS=%d disks managed", managed)
	if c := d.report.lastChange; c != nil {
		fmt.Fprintf(&b, "; last change %s %s %s %s->%s", c.At.Format(time.TimeOnly), c.Device, c.Attribute, c.From, c.To)
	}
	if r := d.report.reload; r != nil && !r.OK {
		fmt.Fprintf(&b, "; policy reload FAILED at %s, previous policy in force", r.At.Format(time.TimeOnly))
	}
	if e := d.report.lastError; e != nil {
		msg := e.Message
		if e.Device != "" {
			msg = e.Device + ": " + msg
		}
		fmt.Fprintf(&b, "; last error %s %s", e.At.Format(time.TimeOnly), firstLine(msg))
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// writeAtomic writes b to a temporary file beside path and renames it over
// path. No fsync: the files it writes describe this boot only.
func writeAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// ErrNotRunning: no daemon is running for that runtime directory.
var ErrNotRunning = errors.New("no daemon is running")

// ReadState reads the state file a running daemon keeps in runtimeDir. It
// returns ErrNotRunning (wrapped) when there is none or its process is gone.
func ReadState(runtimeDir string) (*State, error) {
	p := statePath(runtimeDir)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s)", ErrNotRunning, p)
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !alive(st.PID, st.ProcStart) {
		return nil, fmt.Errorf("%w (pid %d in %s has exited)", ErrNotRunning, st.PID, p)
	}
	return &st, nil
}

// alive reports whether pid runs and is the process that started at start
// (when known).
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return start == 0 || procStart(pid) == start
}

// procStart is field 22 of /proc/PID/stat, 0 when unreadable.
func procStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command (field 2) may hold spaces and parentheses: count from
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
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
