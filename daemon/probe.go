package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/probe"
	"github.com/iosched/iosched/sysfs"
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
// scheduler switches at once on one queue must never happen: on kernel
// 6.18.44 they oopsed it (general protection fault in blk_mq_free_rqs; see
// contrib/bench/README.md, "Two scheduler switches at once on one queue
// oops this kernel").

const schedulerAttr = "scheduler"

// probeRetry is how long a probe waits after finding its disk busy.
const probeRetry = time.Minute

// probes is the daemon's probe book-keeping, under its own mutex (taken
// after Daemon.mu, never before).
type probes struct {
	mu    sync.Mutex
	disks map[string]*diskProbe
	// slots bounds the probes running at once (probe_concurrency); a
	// reload makes a new one, the cancelled probes release the old.
	slots chan struct{}
	// measuring holds, by disk, the probe switching its scheduler, one at
	// most: a channel closed once it has restored what it changed. It
	// outlives a reset, as a cancelled probe is still restoring.
	measuring map[string]chan struct{}
	spent     time.Duration // probe time since the start, against probe_budget
	wg        sync.WaitGroup
	// retry is probeRetry; tests shorten it.
	retry time.Duration
}

// diskProbe is one disk's probe: its decision, or the probe it waits for.
type diskProbe struct {
	state  statefile.ProbeState
	report *probe.Report // the decision, once there is one
	cancel context.CancelFunc
}

func (p *probes) init(concurrency int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disks = map[string]*diskProbe{}
	p.slots = make(chan struct{}, max(concurrency, 1))
	if p.measuring == nil {
		p.measuring = map[string]chan struct{}{}
	}
	if p.retry == 0 {
		p.retry = probeRetry
	}
}

// holds reports whether a probe of the daemon's runs on the disk.
func (p *probes) holds(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.measuring[name] != nil
}

// startMeasuring marks the disk as being probed, once no other probe of it
// (one cancelled, still restoring) is; false when ctx ends first.
func (p *probes) startMeasuring(ctx context.Context, name string) bool {
	for {
		p.mu.Lock()
		other := p.measuring[name]
		if other == nil {
			p.measuring[name] = make(chan struct{})
			p.mu.Unlock()
			return true
		}
		p.mu.Unlock()
		select {
		case <-other:
		case <-ctx.Done():
			return false
		}
	}
}

func (p *probes) endMeasuring(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.measuring[name])
	delete(p.measuring, name)
}

// state is the disk's probe for the state file, nil when none.
func (p *probes) state(name string) *statefile.ProbeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	dp := p.disks[name]
	if dp == nil {
		return nil
	}
	s := dp.state
	return &s
}

// cancel ends the disk's probe, if any, and forgets its decision: the disk
// went away, or another has its name.
func (p *probes) cancel(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if dp := p.disks[name]; dp != nil {
		if dp.cancel != nil {
			dp.cancel()
		}
		delete(p.disks, name)
	}
}

// reset cancels every probe and forgets every decision (a reload: the
// rules may have changed; the re-plan looks the decisions up again).
func (p *probes) reset(concurrency int) {
	p.mu.Lock()
	for _, dp := range p.disks {
		if dp.cancel != nil {
			dp.cancel()
		}
	}
	p.mu.Unlock()
	p.init(concurrency)
}

// stop cancels every probe and waits, at most timeout, for them to
// restore their disks' settings.
func (p *probes) stop(timeout time.Duration) bool {
	p.mu.Lock()
	for _, dp := range p.disks {
		if dp.cancel != nil {
			dp.cancel()
		}
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// recoverProbes puts back the settings of probes a killed process left
// half done, before the first pass reads the disks.
func (d *Daemon) recoverProbes() {
	recovered, err := probe.RecoverInterrupted(d.cfg.StateDir, d.locks, d.fs)
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

func (d *Daemon) probeRunner(pol *policy.Policy) *probe.Runner {
	return &probe.Runner{FS: d.fs, DevDir: d.cfg.DevDir, StateDir: d.cfg.StateDir, Locks: d.locks, Store: probe.OpenStore(d.cfg.StateDir, pol.Daemon.ProbeResults),
		Procs: d.procs.Raise}
}

// probeHolds reports whether a probe (the daemon's, or another process's
// holding the disk's lock) is switching the disk's scheduler.
func (d *Daemon) probeHolds(name string) bool {
	return d.probes.holds(name) || d.locks.Held(name)
}

// withProbe returns ev with the disk's probe decision as its scheduler
// setting. A disk a probing rule matches that has no decision yet is looked
// up in the remembered and seeded results (once), and without one its probe
// is queued: ev stays as it is, the interim settings.
func (d *Daemon) withProbe(pol *policy.Policy, dev *sysfs.Device, ev policy.Evaluation) policy.Evaluation {
	pr, rule := pol.ProbeFor(dev)
	if pr == nil || dev.Scheduler == nil {
		d.probes.cancel(dev.Name) // no longer probed (its facts changed)
		return ev
	}
	name := dev.Name
	d.probes.mu.Lock()
	dp := d.probes.disks[name]
	d.probes.mu.Unlock()
	if dp == nil {
		dp = d.lookUpProbe(pol, name, rule, pr, ev)
	}
	d.probes.mu.Lock()
	rep := dp.report
	d.probes.mu.Unlock()
	if rep == nil {
		return ev
	}
	return rep.Decided(ev, rule)
}

// lookUpProbe finds the disk's remembered or seeded decision, else queues
// its probe. It reads the disk whole (the result's key: model, size, queues),
// once per disk and policy.
func (d *Daemon) lookUpProbe(pol *policy.Policy, name, rule string, pr *policy.Probe, ev policy.Evaluation) *diskProbe {
	dp := &diskProbe{state: statefile.ProbeState{Rule: rule, Status: "pending", Since: time.Now()}}
	for _, s := range ev.Settings {
		if s.Attribute == schedulerAttr {
			dp.state.Interim = strings.Join(s.Values, " ")
		}
	}
	opts := probe.FromPolicy(pr)
	runner := d.probeRunner(pol)
	full, err := d.fs.Device(name)
	if err == nil {
		var rep *probe.Report
		rep, err = runner.Lookup(full, opts, pr.MaxAge)
		if rep != nil {
			dp.report = rep
			dp.state.Status, dp.state.Winner, dp.state.Provenance, dp.state.From = "decided", rep.Winner, rep.Provenance, rep.From
			d.recordProbe(name, rep)
			d.log.Info("probe decision reused", "device", name, "rule", rule, "winner", rep.Winner, "provenance", rep.Provenance, "from", rep.From)
		}
	}
	if err != nil {
		d.log.Warn("looking up remembered probe results", "device", name, "error", err)
	}
	// This is the disk's pass, before its writes: the probe starts only
	// once the pass has returned, so the interim settings are written
	// first (a probe measuring the disk would make the pass skip them).
	passOver := d.queue.passOver(name)
	d.probes.mu.Lock()
	if old := d.probes.disks[name]; old != nil {
		d.probes.mu.Unlock()
		return old // another pass of the disk got there first (cannot: one pass a disk at a time; kept safe)
	}
	d.probes.disks[name] = dp
	queued := false
	if dp.report == nil && !d.stopping.Load() {
		ctx, cancel := context.WithCancel(d.passCtx)
		dp.cancel = cancel
		d.probes.wg.Add(1)
		slots := d.probes.slots
		go d.runProbe(ctx, dp, name, rule, opts, pr.MaxAge, runner, slots, passOver)
		queued = true
	}
	d.probes.mu.Unlock()
	if queued {
		d.log.Info("probe queued; interim settings applied", "device", name, "rule", rule, "interim", dp.state.Interim, "budget", opts.Budget())
		d.probeStep(name, "queued")
	}
	d.markChanged()
	return dp
}

// probeStep tells a test's Config.probeStep where a probe of the disk is.
func (d *Daemon) probeStep(name, step string) {
	if d.cfg.probeStep != nil {
		d.cfg.probeStep(name, step)
	}
}

// runProbe probes the disk when the pass that queued it is over (passOver),
// a slot (probe_concurrency) and the budget allow and the disk is idle,
// remembers the result, and has a pass apply the winner. ctx ends on a
// reload, the disk's removal, or a stop; the probe then restores what it
// changed.
func (d *Daemon) runProbe(ctx context.Context, dp *diskProbe, name, rule string, o probe.Options, maxAge time.Duration, runner *probe.Runner, slots chan struct{}, passOver <-chan struct{}) {
	defer d.probes.wg.Done()
	d.probeStep(name, "waiting for the pass")
	select {
	case <-passOver:
	case <-ctx.Done():
		return
	}
	// update changes the disk's state unless its probe was cancelled
	// (the entry replaced or dropped).
	update := func(f func()) bool {
		d.probes.mu.Lock()
		defer d.probes.mu.Unlock()
		if d.probes.disks[name] != dp || ctx.Err() != nil {
			return false
		}
		f()
		dp.state.Since = time.Now()
		// The state file shows it now, not at the disk's next pass:
		// that pass may be held back (a restore still waiting for the
		// disk holds its lock).
		d.markChanged()
		return true
	}
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		budget := d.policy.Load().Daemon.ProbeBudget
		need := o.Budget()
		d.probes.mu.Lock()
		over := budget > 0 && d.probes.spent+need > budget
		spent := d.probes.spent
		d.probes.mu.Unlock()
		if over {
			<-slots
			if update(func() { dp.state.Status = "budget" }) {
				d.log.Warn("probe_budget spent; the interim settings stay", "device", name, "rule", rule, "spent", spent, "needs", need, "budget", budget)
				d.markChanged()
			}
			return
		}
		if !d.probes.startMeasuring(ctx, name) {
			<-slots
			return
		}
		if !update(func() { dp.state.Status = "running" }) {
			d.probes.endMeasuring(name)
			<-slots
			return
		}
		d.markChanged()
		d.probeStep(name, "measuring")
		// Passes now skip the disk; one that started before may be
		// writing it.
		select {
		case <-d.queue.passOver(name):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// Stopped while a pass may still be writing the disk:
			// probing now could switch its scheduler at the same time.
			d.probes.endMeasuring(name)
			d.log.Info("probe cancelled before it started", "device", name, "rule", rule)
			<-slots
			d.probes.mu.Lock()
			dp.state.Status = "cancelled"
			d.probes.mu.Unlock()
			d.queue.kick(name, full, nil, nil)
			return
		}
		d.log.Info("probe started", "device", name, "rule", rule, "budget", need)
		start := time.Now()
		rep, err := runner.Probe(ctx, name, o, false, maxAge)
		took := time.Since(start)
		if done := rep.RestoreDone(); done != nil {
			// Its restore still waits for the disk (a switch waits for
			// the reads the disk does not answer): the disk stays the
			// probe's until it ends, and the passes skipped meanwhile
			// are owed then.
			go func() {
				<-done
				d.probes.endMeasuring(name)
				d.queue.kick(name, full, nil, nil)
			}()
		} else {
			d.probes.endMeasuring(name)
		}
		d.probes.mu.Lock()
		d.probes.spent += took
		d.probes.mu.Unlock()

		var ref *probe.Refusal
		if err != nil && rep != nil && rep.Winner != "" && ctx.Err() == nil {
			// Measured and decided, but something failed after (the
			// result not remembered: probes.json could not be
			// written): the decision holds until the next start.
			d.log.Error("the probe decided, then failed", "device", name, "error", err)
			err = nil
		}
		switch {
		case (ctx.Err() != nil || errors.Is(err, probe.ErrInterrupted)) && errors.Is(err, probe.ErrRestorePending):
			d.log.Warn("probe cancelled; the disk's settings are not back yet", "device", name, "rule", rule, "error", err)
			<-slots
			d.probes.mu.Lock()
			dp.state.Status = "cancelled"
			d.probes.mu.Unlock()
			return
		case ctx.Err() != nil || errors.Is(err, probe.ErrInterrupted):
			d.log.Info("probe cancelled; the disk's settings were restored", "device", name, "rule", rule)
			<-slots // each slot is given back after its probe's outcome is logged
			d.probes.mu.Lock()
			dp.state.Status = "cancelled"
			d.probes.mu.Unlock()
			// The passes skipped while it restored (a reload's
			// re-plan) are owed.
			d.queue.kick(name, full, nil, nil)
			return
		case err == nil:
			from := rep.From
			if from == "" {
				from = "probed " + time.Now().UTC().Format(time.RFC3339)
			}
			update(func() {
				dp.report = rep
				dp.state.Status, dp.state.Winner, dp.state.Provenance, dp.state.From = "decided", rep.Winner, rep.Provenance, from
			})
			d.recordProbe(name, rep)
			d.log.Info("probe decided", "device", name, "rule", rule, "winner", rep.Winner, "provenance", rep.Provenance, "took", took.Round(time.Millisecond))
			<-slots
			d.queue.kick(name, full, nil, nil)
			return
		case errors.As(err, &ref) && ref.Busy:
			update(func() { dp.state.Status, dp.state.Error = "pending", ref.Reason })
			d.log.Info("probe postponed: the disk is busy", "device", name, "reason", ref.Reason, "retry_in", d.probes.retry)
			<-slots
			d.queue.kick(name, settingsOnly, nil, nil) // the settings held while it ran
			select {
			case <-time.After(d.probes.retry):
			case <-ctx.Done():
				return
			}
		default:
			status := "failed"
			if ref != nil {
				status = "refused"
			}
			update(func() { dp.state.Status, dp.state.Error = status, err.Error() })
			d.log.Warn("probe "+status+"; the interim settings stay", "device", name, "rule", rule, "error", err)
			<-slots
			d.queue.kick(name, full, nil, nil)
			return
		}
	}
}
