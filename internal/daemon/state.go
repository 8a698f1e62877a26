package daemon

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file records what the daemon does, for the state file `iosched
// status` reads (its schema is package statefile) and the log.

// noteDisk records what a pass left on a disk and logs what a user must
// know once: settings the disk cannot take, attributes it could not read.
func (d *Daemon) noteDisk(name string, rec *disk, dev *sysfs.Device, ev policy.Evaluation, p plan.Plan, res apply.Result) {
	var refused []statefile.Refusal
	for _, r := range rec.refused {
		refused = append(refused, r.Refusal)
	}
	st, failed := AfterPass(dev, ev, p, res, refused)
	d.mu.Lock()
	old := rec.state
	d.report.SettleDisk(name, old, &st, failed)
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
	d.report.LastError = &statefile.Problem{At: p.At, Device: name, Message: msg}
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
	d.report.LastChange = &c
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteReload(ok bool, errs, requests []string) {
	d.mu.Lock()
	d.report.Reloaded(ok, errs, requests)
	d.mu.Unlock()
	d.markChanged()
}

// noteReplanned marks the reloads done: every disk re-planned under the
// last.
func (d *Daemon) noteReplanned() {
	d.mu.Lock()
	d.report.Replanned()
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
	d.report.Persisted(err)
	d.persistFailed.Store(err != nil)
	d.mu.Unlock()
	d.markChanged()
}

func (d *Daemon) noteScan(r scanResult) {
	d.mu.Lock()
	d.report.Scan = &statefile.Scan{At: time.Now(), Reason: r.reason, Disks: r.disks, Writes: r.writes, Seconds: r.took.Seconds()}
	d.mu.Unlock()
	lvl := d.log.Info
	if r.reason == "reconcile" && r.writes == 0 {
		lvl = d.log.Debug // the timer's: nothing to say when nothing drifted
	}
	lvl("scan done", "reason", r.reason, "disks", r.disks, "writes", r.writes, "took", r.took.Round(time.Microsecond))
	d.markChanged()
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
		OriginalsUnknown: unknown,
		OriginalsAside:   aside,
		Disks:            make(map[string]*statefile.DiskState, len(d.disks)),
	}
	d.report.Fill(st)
	if p := d.report.Policy; p != nil {
		st.Policy = statefile.PolicyState{Sources: p.Sources, UeventSource: d.ueventSource(p), ReconcileInterval: p.Daemon.ReconcileInterval.String(), RestoreOnExit: p.Daemon.RestoreOnExit,
			SeedErrors: slices.Clone(d.probes.seedErrs)}
	}
	st.LastBurst = d.burstState()
	st.Metrics = d.metricsState()
	st.PolicyFollowed = d.policyFollowed.Load()
	d.metrics.SetDisks(diskKinds(d.disks))
	for name, rec := range d.disks {
		s := rec.state
		s.Probe = rec.probeState()
		s.Adapt = rec.adaptState()
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
	return fileio.Write(statefile.Path(d.cfg.RuntimeDir), b)
}
