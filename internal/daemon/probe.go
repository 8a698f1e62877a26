package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file runs the probes [rule.probe] asks for. A disk a probing rule
// matches gets the rest of the rule's settings at once, its [rule.set]
// scheduler as the interim value; its probe runs later on a goroutine of its
// own (never in a pass, so no other disk waits for it), and the winner is
// then set by an ordinary pass, with the probe's provenance as its rule. A
// remembered or seeded decision is used without probing.
//
// A probe switches the disk's scheduler back and forth, so while one runs
// the daemon writes nothing to that disk: its passes are skipped. Two
// scheduler switches at once on one queue must never happen: they can oops
// the kernel (contrib/bench/README.md, "Two scheduler switches at once on
// one queue oops this kernel").

const schedulerAttr = "scheduler"

// probeRetry is how long a probe waits after finding its disk busy.
const probeRetry = time.Minute

// A probe that failed or was refused is not queued again for the same
// disk and the same probe settings (a reload's re-plan) before a backoff:
// probeBackoff after the first failure, twice as long after each failure
// in a row, at most probeBackoffMax. A probe loads its disk for its whole
// budget; one that fails again at every reload must not load it at every
// reload.
const (
	probeBackoff    = 5 * time.Minute
	probeBackoffMax = 6 * time.Hour
)

// probeFailure is a disk's last failed probe: what it was asked to do, on
// which disk, and until when it is not tried again.
type probeFailure struct {
	rule     string
	probe    policy.Probe
	results  []string
	disk     string // MajorMinor and DiskSeq: another disk under the name is probed
	status   string // "failed" or "refused"
	err      string
	failures int // in a row
	until    time.Time
}

// backoffAfter is the backoff after n failures in a row.
func backoffAfter(n int) time.Duration {
	b := probeBackoff
	for i := 1; i < n && b < probeBackoffMax; i++ {
		b *= 2
	}
	return min(b, probeBackoffMax)
}

func diskIdentity(dev *sysfs.Device) string { return dev.MajorMinor + " " + dev.DiskSeq }

// same reports whether f was a probe of dev by the same rule and settings.
func (f *probeFailure) same(rule string, pr *policy.Probe, results []string, dev *sysfs.Device) bool {
	return f.rule == rule && reflect.DeepEqual(f.probe, *pr) && slices.Equal(f.results, results) && f.disk == diskIdentity(dev)
}

// probeLimits bound the daemon's probes as a whole, under Daemon.mu; each
// disk's probe is its record's (disk.probe).
type probeLimits struct {
	// slots bounds the probes running at once (probe_concurrency); a
	// reload that changes it makes a new one (and cancels every probe:
	// they release the old).
	slots semaphore
	spent time.Duration // probe time since the start, against probe_budget
	// seedErrs are the policy's seeded results' errors (a file not read,
	// a result refused), for the state file.
	seedErrs []string
	// retry is probeRetry; tests shorten it. Set by New, only read after.
	retry time.Duration
}

// diskProbe is one disk's probe: its decision, or the probe it waits for.
type diskProbe struct {
	state  statefile.ProbeState
	report *probe.Report // the decision, once there is one
	cancel context.CancelFunc
	// run is its probe while queued or running, nil once it has ended.
	run *probeRun
}

// probing reports whether a probe of the daemon's is switching the disk's
// scheduler (or still restoring it).
func (rec *disk) probing() bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.measuring != nil
}

// probeHolds is probing for the disk of that name: false for one the
// daemon has no record of.
func (d *Daemon) probeHolds(name string) bool {
	rec := d.recordOf(name)
	return rec != nil && rec.probing()
}

// startMeasuring marks the disk as being probed, once no other probe of it
// (one cancelled, still restoring) is; false when ctx ends first.
func (rec *disk) startMeasuring(ctx context.Context) bool {
	for {
		rec.mu.Lock()
		other := rec.measuring
		if other == nil {
			rec.measuring = make(chan struct{})
			rec.mu.Unlock()
			return true
		}
		rec.mu.Unlock()
		select {
		case <-other:
		case <-ctx.Done():
			return false
		}
	}
}

func (rec *disk) endMeasuring() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	close(rec.measuring)
	rec.measuring = nil
}

// probeState is the disk's probe for the state file, nil when none.
func (rec *disk) probeState() *statefile.ProbeState {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.probe == nil {
		return nil
	}
	s := rec.probe.state
	return &s
}

// cancelProbe ends the disk's probe, if any, and forgets its decision and
// its last failure: the disk went away, another has its name, or it is no
// longer probed. Its hold on the disk ends once the probe has restored
// what it changed.
func (rec *disk) cancelProbe() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.probeFailed = nil
	if dp := rec.probe; dp != nil {
		if dp.cancel != nil {
			dp.cancel()
		}
		rec.probe = nil
	}
}

// reloadProbes takes a new policy (or the first). A probe queued or
// running goes on when pol gives its disk the same probe: the same rule,
// [rule.probe], probe_results and probe_concurrency (a reload that changes
// only other settings must not start a probe of minutes over). Every other
// probe is cancelled, and every decision forgotten: the re-plan looks them
// up again. The disks' last failures stay.
func (d *Daemon) reloadProbes(pol *policy.Policy) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sameSlots := cap(d.probes.slots) == max(pol.Daemon.ProbeConcurrency, 1)
	for _, rec := range d.disks {
		rec.mu.Lock()
		if dp := rec.probe; dp != nil && (dp.run == nil || !sameSlots || !dp.run.stillHolds(pol)) {
			if dp.cancel != nil {
				dp.cancel()
			}
			rec.probe = nil
		}
		rec.mu.Unlock()
	}
	if !sameSlots {
		d.probes.slots = newSemaphore(pol.Daemon.ProbeConcurrency)
	}
}

// probeEnded notes that the disk's probe is over: a reload no longer keeps
// it.
func (rec *disk) probeEnded(dp *diskProbe) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	dp.run = nil
}

// probeTask names a probe's goroutine among the daemon's tasks: "probe
// DISK".
const probeTask = "probe "

func isProbeTask(name string) bool { return strings.HasPrefix(name, probeTask) }

// recoverProbes puts back the settings of probes a killed process left
// half done, before the first pass reads the disks.
func (d *Daemon) recoverProbes() {
	recovered, err := probe.RecoverInterrupted(d.cfg.StateDir, d.locks, d.pipe.FS)
	if err != nil {
		d.log.Error("restoring the settings of interrupted probes", "error", err)
	}
	for _, r := range recovered {
		switch {
		case r.Err != nil:
			d.log.Error("restoring an interrupted probe's settings", "device", r.Device, "error", r.Err)
		case r.Restored:
			d.log.Warn("an interrupted probe's settings restored", "device", r.Device)
		case r.Aside != "":
			d.log.Warn("an interrupted probe's record is unreadable; moved aside", "device", r.Device, "note", r.Note)
		default:
			d.log.Info("an interrupted probe's record dropped", "device", r.Device, "note", r.Note)
		}
	}
}

// checkSeeds reads pol's seeded results (pipeline.SeedsOf: once per
// policy, shared by every disk's lookup), logs each of their errors once,
// and keeps them for the state file: a lookup does not repeat them for
// each disk. A broken seed file costs only its results.
func (d *Daemon) checkSeeds(pol *policy.Policy) {
	var msgs []string
	if len(pol.Daemon.ProbeResults) > 0 {
		err := pipeline.SeedsOf(pol).Err()
		for _, e := range probe.SplitErrors(err) {
			msgs = append(msgs, e.Error())
			d.log.Warn("seeded probe results: not used", "error", e)
		}
	}
	d.mu.Lock()
	d.probes.seedErrs = msgs
	d.mu.Unlock()
}

func (d *Daemon) probeRunner(pol *policy.Policy) *probe.Runner {
	return &probe.Runner{FS: d.pipe.FS, DevDir: d.cfg.DevDir, StateDir: d.cfg.StateDir, Locks: d.locks, Store: probe.NewStore(d.cfg.StateDir, pipeline.SeedsOf(pol)),
		Procs: d.procs.Raise, InFlight: d.inFlight}
}

// probeDecision is the disk's probe decision, for its scheduler setting. A
// disk a probing rule matches that has no decision yet is looked up in the
// remembered and seeded results (once), and without one its probe is
// queued: the decision is pending, ev's settings the interim ones.
func (d *Daemon) probeDecision(pol *policy.Policy, rec *disk, dev *sysfs.Device, ev policy.Evaluation, diskDir *sysfs.Disk) pipeline.ProbeDecision {
	pr, rule := pol.ProbeFor(dev)
	if pr == nil || dev.Scheduler == nil {
		rec.cancelProbe() // no longer probed (its facts changed)
		return pipeline.ProbeDecision{}
	}
	rec.mu.Lock()
	dp := rec.probe
	rec.mu.Unlock()
	if dp == nil {
		dp = d.lookUpProbe(pol, rec, dev, diskDir, rule, pr, ev)
	}
	rec.mu.Lock()
	rep := dp.report
	rec.mu.Unlock()
	return pipeline.ProbeDecision{Rule: rule, Probe: pr, Report: rep}
}

// lookUpProbe finds the disk's remembered or seeded decision
// (pipeline.LookUpProbe, which reads the disk whole, through diskDir when
// this pass opened it: once per disk and policy), else queues its probe.
func (d *Daemon) lookUpProbe(pol *policy.Policy, rec *disk, dev *sysfs.Device, diskDir *sysfs.Disk, rule string, pr *policy.Probe, ev policy.Evaluation) *diskProbe {
	name := dev.Name
	dp := &diskProbe{state: statefile.ProbeState{Rule: rule, Status: "pending", Since: time.Now()}}
	for _, s := range ev.Settings {
		if s.Attribute == schedulerAttr {
			dp.state.Interim = strings.Join(s.Values, " ")
		}
	}
	opts := pipeline.ProbeOptions(pr)
	runner := d.probeRunner(pol)
	dec, err := d.pipe.LookUpProbe(pol, dev, diskDir)
	if rep := dec.Report; rep != nil {
		dp.report = rep
		dp.state.Status, dp.state.Winner, dp.state.Provenance, dp.state.From = "decided", rep.Winner, rep.Provenance, rep.From
		d.recordProbe(name, rep)
		d.log.Info("probe decision reused", "device", name, "rule", rule, "winner", rep.Winner, "provenance", rep.Provenance, "from", rep.From)
	}
	if err != nil {
		d.log.Warn("looking up remembered probe results", "device", name, "error", err)
	}
	// This is the disk's pass, before its writes: the probe starts only
	// once the pass has returned, so the interim settings are written
	// first (a probe measuring the disk would make the pass skip them).
	passOver := d.queue.PassOver(name)
	// Both locks: a reload (reloadProbes) sees the probe with the slots
	// it was queued with.
	d.mu.Lock()
	rec.mu.Lock()
	if old := rec.probe; old != nil {
		rec.mu.Unlock()
		d.mu.Unlock()
		return old // another pass of the disk got there first (cannot: one pass a disk at a time; kept safe)
	}
	rec.probe = dp
	queued := dp.report == nil && !d.stopping.Load()
	var backingOff *probeFailure // a copy: read after the lock is let go
	if f := rec.probeFailed; queued && f != nil {
		switch {
		case !f.same(rule, pr, pol.Daemon.ProbeResults, dev):
			rec.probeFailed = nil // its settings (or the disk) changed: probed at once
		case time.Now().Before(f.until):
			copied := *f
			queued, backingOff = false, &copied
			dp.state.Status = f.status
			dp.state.Error = f.err + "; not probed again before " + f.until.UTC().Format(time.RFC3339)
		}
	}
	if queued {
		ctx, cancel := context.WithCancel(d.passCtx)
		dp.cancel = cancel
		facts := *dev // the pass goes on with dev: the values are copied
		facts.Tunables, facts.IOSched = maps.Clone(dev.Tunables), maps.Clone(dev.IOSched)
		dp.run = &probeRun{
			d: d, ctx: ctx, dp: dp, rec: rec, name: name, rule: rule, probe: pr, opts: opts, runner: runner,
			slots: d.probes.slots, results: pol.Daemon.ProbeResults, facts: &facts,
		}
		run := dp.run
		d.tasks.Do(probeTask+name, func(context.Context) { run.run(passOver) })
	}
	rec.mu.Unlock()
	d.mu.Unlock()
	if backingOff != nil {
		d.log.Info("probe not queued: it failed with the same settings; the interim settings stay", "device", name, "rule", rule,
			"failures", backingOff.failures, "retry_after", backingOff.until.UTC().Format(time.RFC3339))
	}
	if queued {
		d.log.Info("probe queued; interim settings applied", "device", name, "rule", rule, "interim", dp.state.Interim, "budget", opts.Budget())
		d.probeStep(name, "queued")
	}
	d.markChanged()
	return dp
}

// probeStep tells a test's Config.probeStep where a probe of the disk is.
func (d *Daemon) probeStep(name, step string) {
	if d.cfg.hooks.probeStep != nil {
		d.cfg.hooks.probeStep(name, step)
	}
}

// probeRun is one queued probe of a disk: what it was queued for, and
// where it reports.
type probeRun struct {
	d      *Daemon
	ctx    context.Context // ends on a reload that changes it, the disk's removal, or a stop
	dp     *diskProbe
	rec    *disk  // the record dp is (or was) of
	name   string // rec.name's
	rule   string
	probe  *policy.Probe
	opts   probe.Options
	runner *probe.Runner
	slots  semaphore
	// results are the probe_results it was queued with (its runner's
	// seeds), facts the disk as the pass that queued it read it: what a
	// reload tests to tell whether the probe still holds.
	results []string
	facts   *sysfs.Device
}

// stillHolds reports whether pol gives the disk the probe r was queued for.
func (r *probeRun) stillHolds(pol *policy.Policy) bool {
	pr, rule := pol.ProbeFor(r.facts)
	return pr != nil && rule == r.rule && reflect.DeepEqual(*pr, *r.probe) && slices.Equal(pol.Daemon.ProbeResults, r.results)
}

// run probes the disk once the pass that queued it is over (passOver),
// again after probeRetry while the disk is busy, remembers the result, and
// has a pass apply the winner. When ctx ends the probe restores what it
// changed.
func (r *probeRun) run(passOver <-chan struct{}) {
	defer r.rec.probeEnded(r.dp)
	r.d.probeStep(r.name, "waiting for the pass")
	select {
	case <-passOver:
	case <-r.ctx.Done():
		return
	}
	for r.attempt() {
		select {
		case <-time.After(r.d.probes.retry):
		case <-r.ctx.Done():
			return
		}
	}
}

// attempt probes the disk once; it reports whether to try again later
// (the disk was busy). The slot is given back after the outcome is logged.
func (r *probeRun) attempt() (again bool) {
	release, ok := r.acquire()
	if !ok {
		return false
	}
	defer release()
	rep, took, err := r.measure()
	return r.record(rep, took, err)
}

// acquire takes a slot (probe_concurrency), checks the budget, and takes
// the disk from the passes: once it returns true they skip the disk, and
// none is writing it. It returns the slot's release.
func (r *probeRun) acquire() (release func(), ok bool) {
	d := r.d
	if !r.slots.acquire(r.ctx) {
		return nil, false
	}
	defer func() {
		if !ok {
			r.slots.release()
		}
	}()
	budget := d.policy.Load().Daemon.ProbeBudget
	need := r.opts.Budget()
	d.mu.Lock()
	over := budget > 0 && d.probes.spent+need > budget
	spent := d.probes.spent
	d.mu.Unlock()
	if over {
		if r.update(func() { r.dp.state.Status = "budget" }) {
			d.log.Warn("probe_budget spent; the interim settings stay", "device", r.name, "rule", r.rule, "spent", spent, "needs", need, "budget", budget)
		}
		return nil, false
	}
	if !r.rec.startMeasuring(r.ctx) {
		return nil, false
	}
	if !r.update(func() { r.dp.state.Status = "running" }) {
		r.rec.endMeasuring()
		return nil, false
	}
	d.probeStep(r.name, "measuring")
	// Passes now skip the disk; one that started before may be writing
	// it.
	select {
	case <-d.queue.PassOver(r.name):
	case <-r.ctx.Done():
	}
	if r.ctx.Err() != nil {
		// Stopped while a pass may still be writing the disk: probing
		// now could switch its scheduler at the same time.
		r.rec.endMeasuring()
		d.log.Info("probe cancelled before it started", "device", r.name, "rule", r.rule)
		r.cancelled()
		return nil, false
	}
	return r.slots.release, true
}

// measure probes the disk and gives it back to the passes once the probe
// has restored what it changed, which may be after measure returns: a
// restore still waiting for the disk (a switch waits for the reads the disk
// does not answer) keeps it, and the passes skipped meanwhile are owed
// then.
func (r *probeRun) measure() (*probe.Report, time.Duration, error) {
	d := r.d
	d.log.Info("probe started", "device", r.name, "rule", r.rule, "budget", r.opts.Budget())
	start := time.Now()
	rep, err := r.runner.Probe(r.ctx, r.rec.name, r.opts, false, r.probe.MaxAge)
	took := time.Since(start)
	if done := rep.RestoreDone(); done != nil {
		// Not a probe task: the stop's wait for probes is for their
		// cancellation, not for a disk that does not answer.
		d.tasks.Do("restore wait "+r.name, func(ctx context.Context) {
			select {
			case <-done:
				r.rec.endMeasuring()
				d.kick(r.rec.name, full, nil, nil)
			case <-ctx.Done(): // the daemon has stopped: no pass follows
			}
		})
	} else {
		r.rec.endMeasuring()
	}
	d.mu.Lock()
	d.probes.spent += took
	d.mu.Unlock()
	return rep, took, err
}

// record logs the probe's outcome, keeps its decision, and asks for the
// pass that applies it (or the settings held while it ran). It reports
// whether to try again later: the disk was busy.
func (r *probeRun) record(rep *probe.Report, took time.Duration, err error) (again bool) {
	d, ctx := r.d, r.ctx
	var ref *probe.Refusal
	if err != nil && rep != nil && rep.Winner != "" && ctx.Err() == nil {
		// Measured and decided, but something failed after (the
		// result not remembered: probes.json could not be written):
		// the decision holds until the next start.
		d.log.Error("the probe decided, then failed", "device", r.name, "error", err)
		err = nil
	}
	if err == nil && rep != nil && rep.Undecided {
		// A rate that moved during the probe decides nothing: the
		// interim settings stay (the scheduler the probe left may not be
		// the disk's own when that is no candidate), and the disk is
		// probed again after the backoff.
		err = fmt.Errorf("no decision: %s", rep.Reason)
	}
	switch {
	case (ctx.Err() != nil || errors.Is(err, probe.ErrInterrupted)) && errors.Is(err, probe.ErrRestorePending):
		d.log.Warn("probe cancelled; the disk's settings are not back yet", "device", r.name, "rule", r.rule, "error", err)
		r.rec.mu.Lock()
		r.dp.state.Status = "cancelled"
		r.rec.mu.Unlock()
		// The pass owed is asked for once the restore ends (measure).
		return false
	case ctx.Err() != nil || errors.Is(err, probe.ErrInterrupted):
		d.log.Info("probe cancelled; the disk's settings were restored", "device", r.name, "rule", r.rule)
		// The passes skipped while it restored (a reload's re-plan)
		// are owed.
		r.cancelled()
		return false
	case err == nil:
		from := rep.From
		if from == "" {
			from = "probed " + time.Now().UTC().Format(time.RFC3339)
		}
		r.update(func() {
			r.dp.report = rep
			r.dp.state.Status, r.dp.state.Winner, r.dp.state.Provenance, r.dp.state.From = "decided", rep.Winner, rep.Provenance, from
		})
		d.recordProbe(r.name, rep)
		r.rec.mu.Lock()
		r.rec.probeFailed = nil
		r.rec.mu.Unlock()
		d.log.Info("probe decided", "device", r.name, "rule", r.rule, "winner", rep.Winner, "provenance", rep.Provenance, "took", took.Round(time.Millisecond))
		d.kick(r.rec.name, full, nil, nil)
		return false
	case errors.As(err, &ref) && ref.Busy:
		r.update(func() { r.dp.state.Status, r.dp.state.Error = "pending", ref.Reason })
		d.log.Info("probe postponed: the disk is busy", "device", r.name, "reason", ref.Reason, "retry_in", d.probes.retry)
		d.kick(r.rec.name, settingsOnly, nil, nil) // the settings held while it ran
		return true
	default:
		status := "failed"
		if ref != nil {
			status = "refused"
		}
		r.update(func() { r.dp.state.Status, r.dp.state.Error = status, err.Error() })
		until := r.failed(status, err)
		d.log.Warn("probe "+status+"; the interim settings stay", "device", r.name, "rule", r.rule, "error", err,
			"retry_after", until.UTC().Format(time.RFC3339))
		d.kick(r.rec.name, full, nil, nil)
		return false
	}
}

// failed notes the probe's failure, for the backoff before the disk is
// probed again with the same settings, and returns when that backoff ends.
func (r *probeRun) failed(status string, err error) time.Time {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	f := &probeFailure{rule: r.rule, probe: *r.probe, results: r.results, disk: diskIdentity(r.facts), status: status, err: err.Error(), failures: 1}
	if old := r.rec.probeFailed; old != nil && old.same(r.rule, r.probe, r.results, r.facts) {
		f.failures = old.failures + 1
	}
	f.until = time.Now().Add(backoffAfter(f.failures))
	r.rec.probeFailed = f
	// The run is over for a reload from here, with the failure noted: a
	// reload between the two must not keep the failed probe as one still
	// running (probeEnded comes later), or the re-plan that follows finds
	// the disk's probe taken and never probes the new settings.
	r.dp.run = nil
	return f.until
}

// cancelled marks the probe cancelled and asks for the pass owed to the
// disk: those skipped while the probe held it.
func (r *probeRun) cancelled() {
	r.rec.mu.Lock()
	r.dp.state.Status = "cancelled"
	r.rec.mu.Unlock()
	r.d.kick(r.rec.name, full, nil, nil)
}

// update changes the disk's probe state unless its probe was cancelled
// (the entry replaced or dropped), and reports whether it did.
func (r *probeRun) update(f func()) bool {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if r.rec.probe != r.dp || r.ctx.Err() != nil {
		return false
	}
	f()
	r.dp.state.Since = time.Now()
	// The state file shows it now, not at the disk's next pass: that
	// pass may be held back (a restore still waiting for the disk holds
	// its lock).
	r.d.markChanged()
	return true
}

// semaphore bounds how many probes run at once (probe_concurrency).
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, max(n, 1)) }

// acquire takes a slot, or returns false when ctx ends first.
func (s semaphore) acquire(ctx context.Context) bool {
	select {
	case s <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s semaphore) release() { <-s }
