package daemon

import (
	"context"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file runs the adaptive rules ([rule.adapt]). A disk an adaptive
// rule matches whose probe decision (remembered, seeded or measured) has
// curves gets a controller (package adapt) when its pass finds it so, and
// a task samples the stat file of every such disk at its rule's interval
// and feeds the controllers. When one says Switch, its choice becomes the
// disk's wanted scheduler in place of the probe's winner, with the
// switch's reason as its provenance, and an ordinary pass writes it
// (through the queue, under the disk's lock): so drift repair and the
// reconcile keep the adaptive choice too, until the next switch.
//
// Nothing of this runs without an adaptive disk: the sampler starts with
// the first and ends with the last, and no timer ticks meanwhile.

// adaptDisk is one adaptive disk: its controller and what the sampler
// keeps between two samples.
type adaptDisk struct {
	id     diskID // for its switch history
	rule   string
	opt    adaptopt.Options
	curves map[string][]probe.CurvePoint
	order  []string
	ctl    *adapt.Controller

	// stat is the disk's stat file, held open by the sampler (nil until
	// its first sample, and after a read failed); prev its last sample
	// when primed.
	stat   *observe.StatFile
	prev   observe.Sample
	primed bool
	next   time.Time // when the next sample is due
	last   observe.Point

	// current is the disk's scheduler as its last pass left it (or the
	// last switch asked for, until its pass).
	current string
	// want and reason are the adaptive choice, "" before the first
	// switch.
	want, reason string
	// writing: a switch was decided and its pass has not yet left it on
	// the disk; written is when one did, so that the sample spanning the
	// write is marked adapt.Sample.Switching.
	writing bool
	written time.Time
	// shown is what the state file was last told of, so that a sample
	// that changes nothing a reader sees does not rewrite it.
	shown adaptNews
	// metered is the disk's depths (the last sample's busy depth, the
	// window's) as the metrics were last given them, meteredOnce that
	// they were: an idle disk's samples leave the recorder alone.
	metered     [2]float64
	meteredOnce bool
}

// adaptNews is what makes an adaptive disk's state worth writing again.
type adaptNews struct {
	want, favoured, agreeing, held string
	verdict                        string
	lastSwitch, pinned, cleared    time.Time
	switches                       int
	depthStep                      int // the window depth in steps of about 10%
}

// adaptDecision keeps, makes or drops the disk's controller as the policy
// and the probe's decision say, and returns dec with the adaptive choice
// as its winner once the controller made one. A disk keeps its controller
// (its window, its switches, its choice) while its adaptive rule, the
// rule's options and the probe's curves stay the same: across a reload
// that changes neither, and drift repairs.
func (d *Daemon) adaptDecision(pol *policy.Policy, rec *disk, dev *sysfs.Device, dec pipeline.ProbeDecision) pipeline.ProbeDecision {
	name := dev.Name
	opts, rule := pol.AdaptFor(dev)
	var curves map[string][]probe.CurvePoint
	var order []string
	if opts != nil && dec.Report != nil && dev.Scheduler != nil {
		curves, order = adapt.Curves(dec.Report.Candidates, dec.Report.Depth)
	}
	if len(order) < 2 {
		d.dropAdaptive(rec, "no adaptive rule with a probe decision matches it")
		return dec
	}
	rec.mu.Lock()
	x := rec.adapt
	// The switch history (and the choice it ends on) outlives the
	// controller: a new one (new options, curves or rule; a restart,
	// from the state directory) takes it over, so that the limits hold
	// over any 24 hours.
	var hist adapt.History
	var kept, started bool
	if x != nil && (x.rule != rule || x.opt != opts.Options || !slices.Equal(x.order, order) || !reflect.DeepEqual(x.curves, curves)) {
		hist, kept = x.ctl.History(), true
		x.close()
		rec.adapt = nil
		x = nil
		d.log.Info("adaptive: its rule or its probe's curves changed; the window starts again, its switches still count", "device", name, "rule", rule)
	}
	if x == nil {
		ctl, err := adapt.NewController(opts.Options, curves, order, *dev.Scheduler)
		if err != nil {
			rec.mu.Unlock()
			// The policy validated the options: not expected.
			d.log.Error("adaptive: the rule's options are refused", "device", name, "rule", rule, "error", err)
			return dec
		}
		if !kept {
			hist, kept = d.adaptHist.lookup(name, dev)
		}
		x = &adaptDisk{id: idOfDevice(dev, d.adaptHist.bootID), rule: rule, opt: opts.Options, curves: curves, order: order, ctl: ctl, current: *dev.Scheduler}
		if kept {
			ctl.Restore(hist)
			// The last switch's choice stays the disk's wanted
			// scheduler: going back to the probe's winner would be a
			// switch no limit counts.
			if slices.Contains(order, hist.LastTo) {
				x.want, x.reason = hist.LastTo, hist.LastReason
			}
		}
		x.next = nextSample(time.Now(), x.opt.Sample)
		rec.adapt = x
		d.log.Info("adaptive: following the disk's depth", "device", name, "rule", rule, "sample", x.opt.Sample, "window", x.opt.Window, "switches_today", ctl.State().SwitchesToday)
		started = true
	}
	want, reason := x.want, x.reason
	rec.mu.Unlock()
	if started {
		d.startSampler(&d.adapt, "adaptive sampler", d.sampleAdaptive)
		d.markChanged()
	}
	if want == "" || !slices.Contains(dev.Schedulers, want) {
		return dec
	}
	rep := *dec.Report
	rep.Winner, rep.Provenance = want, reason
	return pipeline.ProbeDecision{Rule: rule, Probe: dec.Probe, Report: &rep}
}

// adaptPassed tells the disk's controller, if any, which scheduler the
// disk's pass left on it. held: the pass could not write (another holds
// the disk's lock), so the samples since say nothing of the scheduler
// they were taken under: the controller starts its window again.
func (rec *disk) adaptPassed(dev *sysfs.Device, held bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	x := rec.adapt
	if x == nil {
		return
	}
	if s := Current(dev, schedulerAttr); s != "" {
		x.current = s
		if x.writing && s == x.want {
			x.writing, x.written = false, time.Now()
		}
	}
	if held {
		x.gap()
	}
}

// dropAdaptive forgets the disk's controller, if any.
func (d *Daemon) dropAdaptive(rec *disk, why string) {
	name := rec.name.String()
	rec.mu.Lock()
	x := rec.adapt
	if x != nil {
		x.close()
		rec.adapt = nil
	}
	rec.mu.Unlock()
	if x != nil {
		d.metrics.ForgetAdapt(name)
		d.log.Info("adaptive: no longer following the disk", "device", name, "why", why)
		d.markChanged()
	}
}

// adaptState is the disk's adaptive state for the state file, nil when it
// has none.
func (rec *disk) adaptState() *statefile.AdaptState {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	x := rec.adapt
	if x == nil {
		return nil
	}
	st := x.ctl.State()
	out := &statefile.AdaptState{
		Rule: x.rule, Sample: x.opt.Sample.String(), Window: x.opt.Window.String(),
		Scheduler: x.want, BusyDepth: x.last.BusyDepth, Busy: x.last.Busy,
		WindowDepth: st.Depth, WindowSeconds: st.Span.Seconds(),
		Favoured: st.Favoured, Gain: st.Gain, Agreeing: st.Agreeing,
		SwitchesToday: st.SwitchesToday, Held: st.Held, GuardVerdict: st.GuardVerdict,
	}
	if !st.GuardCleared.IsZero() {
		out.GuardCleared = &statefile.GuardCleared{At: st.GuardCleared, Reason: st.GuardClearedReason}
	}
	if !st.AgreeingSince.IsZero() {
		t := st.AgreeingSince
		out.AgreeingSince = &t
	}
	if !st.LastSwitch.IsZero() {
		out.LastSwitch = &statefile.Switch{At: st.LastSwitch, From: st.LastFrom, To: st.LastTo, Reason: st.LastReason}
	}
	if st.PinnedUntil.After(st.LastSwitch) && !st.PinnedUntil.IsZero() {
		t := st.PinnedUntil
		out.PinnedUntil = &t
	}
	return out
}

// ruleLabel is a setting's rule as the metrics count it: an adaptive
// choice's reason, a new text at each switch, is left out, so that the
// label's values stay bounded.
func ruleLabel(rule string) string {
	if i := strings.Index(rule, " (adapt: "); i >= 0 && strings.HasSuffix(rule, ")") {
		return rule[:i] + " (adapt)"
	}
	return rule
}

// nextSample is when a disk sampled every interval is next due: on the
// interval's multiples, so that every disk of one interval is sampled in
// the same wakeup.
func nextSample(now time.Time, interval time.Duration) time.Time {
	return now.Truncate(interval).Add(interval)
}

// sampleAdaptive is the sampler task: it sleeps until the next disk is
// due, samples every disk due then, and ends once no adaptive disk is
// left (or the daemon stops).
func (d *Daemon) sampleAdaptive(ctx context.Context) {
	d.runSampler(ctx, &d.adapt, func(rec *disk) *time.Time {
		if rec.adapt == nil {
			return nil
		}
		return &rec.adapt.next
	}, d.sampleDue, func(rec *disk) {
		if rec.adapt != nil {
			rec.adapt.close()
		}
	})
}

// adaptAction is what a sample asks for once the lock is let go.
type adaptAction struct {
	rec       *disk
	id        diskID
	history   adapt.History // after a switch
	point     observe.Point
	dec       adapt.Decision
	scheduler string
	depth     float64 // the window's
	news      bool
}

// sampleDue samples every disk due by now and carries out what the
// controllers say: the switches, the log, the metrics, the state file.
//
// A pass over 1000 idle disks must stay far below the CPU target (0.5% of
// one CPU at 5 s): what a sample of an idle disk leaves to do after the
// record's lock is nothing, so such a pass allocates nothing per disk and
// keeps no per-disk list.
func (d *Daemon) sampleDue(now time.Time) {
	defer d.metrics.Hold()() // the pass's figures in one write, after it
	var acts []adaptAction
	hook := d.cfg.hooks.adaptSampled != nil
	for _, rec := range d.records() {
		rec.mu.Lock()
		// A disk due within a few milliseconds is sampled now: the
		// timer's slack must not cost a second wakeup.
		if x := rec.adapt; x != nil && !x.next.After(now.Add(5*time.Millisecond)) {
			x.next = x.next.Add(x.opt.Sample)
			if !x.next.After(now) { // late (the machine was suspended): skip
				x.next = nextSample(now, x.opt.Sample)
			}
			if act, ok := d.sampleDisk(rec, x); ok {
				// Under the record's lock, so that a controller
				// dropped meanwhile (its series forgotten after) gets
				// no series back.
				if depths := [2]float64{act.point.BusyDepth, act.depth}; !x.meteredOnce || depths != x.metered {
					d.metrics.SetAdaptDepth(rec.name.String(), depths[0], depths[1])
					x.metered, x.meteredOnce = depths, true
				}
				if act.dec.Switch || act.dec.Unpin || act.news || hook {
					acts = append(acts, act)
				}
			}
		}
		rec.mu.Unlock()
	}
	for _, act := range acts {
		name := act.rec.name.String()
		if dec := act.dec; dec.Switch {
			// Recorded before it is written: a crash between the two
			// counts a switch not made, never the other way round.
			err := d.adaptHist.record(name, act.id, act.history)
			if err != nil {
				d.log.Warn("adaptive: the switch history cannot be saved: a restart would not count this switch", "device", name, "error", err)
			}
			d.notePersistence(err)
			if dec.Revert {
				d.log.Warn("adaptive: the guard rail switches back", "device", name, "from", dec.From, "to", dec.To, "reason", dec.Reason, "pinned_until", dec.PinnedUntil)
			} else {
				d.log.Info("adaptive: switching", "device", name, "from", dec.From, "to", dec.To, "reason", dec.Reason)
			}
			d.metrics.AdaptSwitched(dec.To, dec.Revert)
			d.kick(act.rec.name, settingsOnly, nil, nil)
		}
		if dec := act.dec; dec.Unpin {
			// The lifted pin is saved, or a restart would hold the
			// disk to it.
			err := d.adaptHist.record(name, act.id, act.history)
			if err != nil {
				d.log.Warn("adaptive: the switch history cannot be saved: a restart would pin the disk again", "device", name, "error", err)
			}
			d.notePersistence(err)
			d.log.Info("adaptive: the guard rail lifts its pin", "device", name, "scheduler", dec.To, "reason", dec.Reason)
		}
		if act.news {
			d.markChanged()
		}
		if d.cfg.hooks.adaptSampled != nil {
			d.cfg.hooks.adaptSampled(name, act.point, act.dec, act.scheduler)
		}
	}
}

// sampleDisk reads the disk's stat file and gives the controller x (the
// record's) the operating point since the last sample. Called with the
// record's lock held (the stat file is closed under it when the controller
// is dropped). False when there is no point: the first sample, a gap, a
// read that failed.
func (d *Daemon) sampleDisk(rec *disk, x *adaptDisk) (adaptAction, bool) {
	name := rec.name.String()
	// A probe measuring the disk makes its own load: no sample of it is
	// the workload's, and none may switch the disk under the probe. The
	// daemon's own is asked here; another process's (holding the disk's
	// lock) below, of a busy disk.
	if rec.measuring != nil {
		x.gap()
		d.adaptGap(name)
		return adaptAction{}, false
	}
	if x.stat == nil {
		st, err := observe.Open(d.pipe.StatPath(rec.name))
		if err != nil {
			d.log.Debug("adaptive: the disk's stat file", "device", name, "error", err)
			return adaptAction{}, false
		}
		x.stat = st
	}
	s, err := x.stat.Read()
	if err != nil {
		// Gone, most likely: its pass forgets it.
		d.log.Debug("adaptive: reading the disk's stat file", "device", name, "error", err)
		x.close()
		x.gap()
		return adaptAction{}, false
	}
	if !x.primed {
		x.prev, x.primed = s, true
		return adaptAction{}, false
	}
	p, err := observe.Between(x.prev, s)
	x.prev = s
	if err != nil {
		x.ctl.Reset()
		return adaptAction{}, false
	}
	// Another process's lock is asked about only when the disk was busy
	// (its probe reads): an idle disk costs its one read.
	if p.Busy >= adapt.IdleBusy && d.locks.Held(name) {
		x.ctl.Reset()
		d.adaptGap(name)
		return adaptAction{}, false
	}
	x.last = p
	sample := adapt.SampleOf(p, x.current)
	sample.Switching = x.writing || p.At.Add(-p.Elapsed).Before(x.written)
	dec := x.ctl.Observe(sample)
	act := adaptAction{rec: rec, point: p, dec: dec, scheduler: x.current}
	if dec.Switch {
		// Taken as made (the controller's rule): the next sample is
		// under To, and the pass just asked for writes it.
		x.want, x.reason, x.current = dec.To, dec.Reason, dec.To
		x.writing = true
	}
	if dec.Switch || dec.Unpin {
		act.id, act.history = x.id, x.ctl.History()
	}
	st := x.ctl.State()
	act.depth = st.Depth
	news := adaptNews{want: x.want, favoured: st.Favoured, agreeing: st.Agreeing, held: st.Held,
		lastSwitch: st.LastSwitch, pinned: st.PinnedUntil, switches: st.SwitchesToday,
		verdict: st.GuardVerdict, cleared: st.GuardCleared}
	if st.Depth > 0 {
		news.depthStep = 1 + int(math.Round(math.Log(st.Depth)/math.Log(1.1)))
	}
	act.news = news != x.shown
	x.shown = news
	return act, true
}

// gap forgets the last sample and the window: the next point would span
// a time the disk was not the workload's (a probe held it), or not under
// the scheduler it was reported under.
func (x *adaptDisk) gap() {
	x.primed = false
	x.ctl.Reset()
}

func (x *adaptDisk) close() {
	if x.stat != nil {
		x.stat.Close()
		x.stat = nil
	}
	x.primed = false
}

// adaptGap tells the test hook, if any, that a sample of name was not
// given to its controller because a probe held the disk.
func (d *Daemon) adaptGap(name string) {
	if d.cfg.hooks.adaptGap != nil {
		d.cfg.hooks.adaptGap(name)
	}
}
