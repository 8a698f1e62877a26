package daemon

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
	"github.com/iosched/iosched/internal/uevent"
)

// disk is the daemon's record of one disk: what it remembers between
// passes, and what runs or is kept for the disk beside them, which its
// teardown ends. A record is made by the disk's first pass and dropped when
// a pass finds the disk gone.
//
// Locks, in the one order the daemon takes them: Daemon.mu, then a
// record's mu, never the other way round. Daemon.mu guards the record map
// (Daemon.disks), the daemon-wide report, each record's state, and what
// bounds the probes and samplers as a whole (Daemon.probes, the samplers'
// running flags). A record's mu guards what goroutines beside the disk's
// pass share: its probe (the probe's goroutine), its adaptive controller
// and observer (the samplers), and the probe's hold on the disk. Under a
// record's mu only leaf locks are taken (adaptHistories', disklock's, the
// metrics recorder's).
// The rest (snap, facts, props, refused) is the disk's pass's alone: the
// queue never runs two passes of a disk at once.
type disk struct {
	d    *Daemon
	name sysfs.Name
	// snap holds the facts as last read, and only the values of the
	// attributes the policy sets.
	snap *sysfs.Device
	// facts are those snap was read with: the policy's needs then.
	facts sysfs.Facts
	props map[string]string   // udev properties from the last uevent
	state statefile.DiskState // under Daemon.mu
	// refused are the writes the kernel refused, by attribute: not
	// retried before their Retry time unless the value changes.
	refused map[string]*refusal

	mu sync.Mutex
	// probe is the disk's probe decision, or the probe it waits for
	// (probe.go); nil when no probing rule matches it, or until its pass
	// looks the decision up.
	probe *diskProbe
	// probeFailed is its last failed probe: it outlives a reload, so that
	// the disk is not probed again before the backoff.
	probeFailed *probeFailure
	// measuring is set while a probe switches the disk's scheduler, one
	// at most: a channel closed once it has restored what it changed. It
	// outlives the probe's cancellation (a cancelled probe still
	// restores): passes skip the disk meanwhile.
	measuring chan struct{}
	adapt     *adaptDisk    // its adaptive controller (adapt.go), nil when none
	observed  *observedDisk // its observer (observe.go), nil when none
}

// refusal is a write the kernel refused, and how long the daemon waits
// before trying it again.
type refusal struct {
	statefile.Refusal
	backoff time.Duration
}

// settled reports whether the last pass left attr at value, as the policy
// wanted: finding it changed later is drift.
func (rec *disk) settled(attr, value string) bool {
	for _, a := range rec.state.Settings {
		if a.Attribute == attr {
			return a.Want == "" && a.Value == value
		}
	}
	return false
}

// pass brings one disk to its policy: read it, evaluate the policy, plan,
// apply, remember. A disk that needs nothing costs its reads and no log.
func (d *Daemon) pass(name string, j job) {
	disk := j.disk
	defer func() {
		// A bug met on one disk must not take the others down with it.
		if v := recover(); v != nil {
			d.log.Error("internal error; the disk is skipped until its next event", "device", name, "panic", v, "stack", string(debug.Stack()))
		}
		if d.cfg.hooks.passDone != nil {
			d.cfg.hooks.passDone(name)
		}
	}()
	if j.kind == removal {
		if d.pipe.Gone(disk) {
			d.forget(disk)
			return
		}
		j.kind = full // still there: a full pass tells whether it is the same disk
	}
	rec := d.record(disk)
	if rec.probing() {
		return // its probe switches the scheduler; a pass follows it
	}
	pol := d.policy.Load()
	dev, ev, diskDir, err := d.readDisk(pol, disk, rec, j)
	if diskDir != nil {
		defer diskDir.Close()
	}
	if err != nil {
		if sysfs.Gone(err) {
			d.forget(disk)
			return
		}
		d.noteError(name, rec, err.Error())
		return
	}
	if d.stopping.Load() {
		return // a stop abandons what has not started writing (ev may be cut short)
	}
	if len(ev.Matched) == 0 && len(rec.state.Rules) > 0 {
		// The rules that matched on the last pass no longer do (a
		// reload, facts changed): what ran for them ends. Only this
		// pass writes rec.state, so it is read without the lock.
		rec.teardown(noRuleMatches)
	}
	a := d.pipe.Plan(dev, ev, d.adaptDecision(pol, rec, dev, d.probeDecision(pol, rec, dev, ev, diskDir)))
	d.observeDisk(pol, rec, dev)
	ev, p := a.Eval, a.Plan
	// A pass udevd's processed event asked for retries what was held: a
	// value not kept before may have been a udev rule's write racing ours,
	// not the kernel's refusal, and udevd is done with the disk now.
	if rec.refused != nil && !j.afterUdev {
		p.Changes = d.holdRefused(rec, p.Changes)
	}
	if pol.Daemon.RestoreOnExit && d.orig.Suspects() {
		d.notePersistence(d.orig.MarkUnknown(dev, ev, p, d.log))
	}
	res := apply.Result{Device: name}
	if !p.Empty() && !d.leaveToUdevd(dev, p, j) {
		if d.stopping.Load() {
			return // a stop abandons what has not started writing
		}
		if rec.probing() {
			return // the daemon's probe is switching its scheduler
		}
		var q apply.Queue = d.pipe.Queue(disk)
		if diskDir != nil {
			q = diskDir // written where it was read
		}
		if d.cfg.hooks.passTarget != nil {
			q = apply.QueueOf(d.cfg.hooks.passTarget(apply.AttrsOf(q, name)), name)
		}
		var remember func()
		if pol.Daemon.RestoreOnExit {
			// Under the disk's lock: no probe's candidate is taken
			// for the disk's original.
			remember = func() {
				err := d.orig.Remember(dev, p.Changes)
				if err != nil {
					d.log.Error("remembering original values; restore_on_exit may not restore them", "device", name, "error", err)
				}
				d.notePersistence(err)
			}
		}
		// The disk's lock is taken after the check above, so no probe
		// starts between it and the writes.
		var err error
		res, err = d.pipe.Write(d.passCtx, d.locks, d.applier, q, p, remember)
		switch {
		case disklock.IsBusy(err):
			d.noteHeld(name, rec, err) // another process probes it (or writes its settings)
			rec.adaptPassed(dev, true)
			return
		case err != nil:
			d.log.Warn("not written this pass: the disk's lock cannot be taken", "device", name, "error", err)
			return
		}
		d.writes.Add(int64(res.Writes))
		if res.Gone {
			d.forget(disk)
			return
		}
		repeated := d.noteRefusals(rec, res)
		d.logOutcomes(dev, rec, res, j.afterUdev, repeated)
		settle(dev, res)
	}
	rec.adaptPassed(dev, false)
	d.noteDisk(name, rec, dev, ev, p, res)
	rec.snap = trim(dev, ev)
	if !j.received.IsZero() {
		d.metrics.Applied(j.received)
	}
}

// readDisk reads what the pass needs. A settingsOnly pass re-reads only the
// attributes the policy sets, a handful of small files, so a reconcile of
// 1000 disks costs milliseconds; a full one opens the disk's directory and
// reads the facts the policy tests, and returns the directory still open
// for the writes (the caller closes it). A settingsOnly pass is full too when the
// policy (reloaded) tests a fact the snapshot was not read with, or NOWAIT,
// never tested on this disk.
func (d *Daemon) readDisk(pol *policy.Policy, disk sysfs.Name, rec *disk, j job) (*sysfs.Device, policy.Evaluation, *sysfs.Disk, error) {
	sc := pipeline.ScopeFor(pol)
	if j.props != nil {
		rec.props = j.props
	}
	if j.kind == settingsOnly && rec.snap != nil && sc.Facts&^rec.facts == 0 && (!sc.NoWait || pipeline.NoWaitTested(rec.snap)) {
		dev := rec.snap // this pass's own: updated in place
		dev.Properties = rec.props
		ev := d.pipe.EvaluatePolicy(pol, dev)
		// A probing rule sets the scheduler by its decision (or an
		// adaptive choice) even when its [rule.set] does not.
		probed, _ := pol.ProbeFor(dev)
		err := d.pipe.Refresh(d.pipe.Queue(disk), dev, ev, probed != nil)
		if err == nil || sysfs.Gone(err) {
			return dev, ev, nil, err
		}
		// Something unexpected: read the disk afresh.
	}
	diskDir, err := d.pipe.OpenDisk(disk, j.devpath)
	if err != nil {
		return nil, policy.Evaluation{}, nil, err
	}
	handed := false
	defer func() {
		if !handed { // an error, or a panic pass recovers from
			diskDir.Close()
		}
	}()
	// NOWAIT is a driver property: the snapshot's answer is kept for the
	// same disk (pipeline.Read), and tested only when a rule tests it, as
	// the test opens the device node, which costs more than the rest of a
	// pass.
	dev, err := d.pipe.Read(diskDir, sc, j.ident, rec.snap)
	if err != nil {
		return nil, policy.Evaluation{}, nil, err
	}
	if rec.snap != nil && (rec.snap.MajorMinor != dev.MajorMinor || rec.snap.DiskSeq != dev.DiskSeq) {
		// Another disk under the same name: its removal and arrival
		// were among events lost (this is the rescan after).
		d.renew(rec, j.props)
	}
	rec.facts = sc.Facts
	if rec.props == nil && d.udev {
		// No event brought them (the first scan, a rescan): udevd's
		// database has what its last event said.
		rec.props = uevent.UdevProperties(d.cfg.UdevDataDir, dev.MajorMinor)
	}
	dev.Properties = rec.props
	ev := d.pipe.EvaluatePolicy(pol, dev)
	handed = true
	return dev, ev, diskDir, nil
}

// settle records in dev the values apply found or left.
func settle(dev *sysfs.Device, res apply.Result) {
	for _, o := range res.Outcomes {
		v := o.Before
		if o.Status == apply.Written || o.Status == apply.Mismatch {
			v = o.Got
		}
		if v != "" {
			dev.SetValue(sysfs.Attr(o.Attribute), v)
		}
	}
}

// trim keeps in dev only the values of the attributes ev sets: a later
// verify pass re-reads those (and any a new policy sets), so the rest would
// only cost memory, about a kilobyte a disk.
func trim(dev *sysfs.Device, ev policy.Evaluation) *sysfs.Device {
	attrs := make([]sysfs.Attr, len(ev.Settings))
	for i, s := range ev.Settings {
		attrs[i] = sysfs.Attr(s.Attribute)
	}
	dev.KeepValues(attrs)
	return dev
}

// logOutcomes logs one line per change made, and each failure once: a
// failure in repeated (the same refusal as last time) is a debug line.
// afterUdev: the pass was asked for by udevd's processed event.
func (d *Daemon) logOutcomes(dev *sysfs.Device, rec *disk, res apply.Result, afterUdev bool, repeated map[string]bool) {
	for _, o := range res.Outcomes {
		attrs := []any{"device", dev.Name, "attribute", o.Attribute, "from", o.Before, "to", o.To, "rule", o.Rule}
		switch o.Status {
		case apply.Written:
			drift := rec.settled(o.Attribute, o.To)
			switch {
			case afterUdev && d.logUdevOverride(dev, o, drift, attrs):
				drift = true
			case drift:
				d.log.Warn("drift repaired", attrs...)
			default:
				d.log.Info("set", attrs...)
			}
			d.noteChange(statefile.Change{At: time.Now(), Device: dev.Name, Attribute: o.Attribute, From: o.Before, To: o.To, Rule: o.Rule, Drift: drift})
			d.metrics.Changed(o.Attribute, ruleLabel(o.Rule), drift)
		case apply.Mismatch:
			d.metrics.ApplyFailed(o.Attribute)
			switch {
			case repeated[o.Attribute]:
				d.log.Debug("the kernel kept another value again", append(attrs, "got", o.Got)...)
			case !d.logUdevRace(dev, o, attrs):
				d.log.Warn("the kernel kept another value", append(attrs, "got", o.Got)...)
			}
		case apply.Failed:
			d.metrics.ApplyFailed(o.Attribute)
			if repeated[o.Attribute] {
				d.log.Debug("write refused again", append(attrs, "error", o.Err)...)
			} else {
				d.log.Error("write failed", append(attrs, "error", o.Err)...)
			}
		}
	}
}

// Refused writes are retried after refusalBackoff, then twice as long after
// each refusal, up to maxRefusalBackoff: a value the kernel rejects (an
// nr_requests above what the driver allows, EINVAL) would otherwise be
// written, and logged, on every reconcile.
const (
	refusalBackoff    = time.Minute
	maxRefusalBackoff = time.Hour
)

// holdRefused drops the changes that write a value the kernel refused,
// until their retry time.
func (d *Daemon) holdRefused(rec *disk, changes []plan.Change) []plan.Change {
	now := time.Now()
	return slices.DeleteFunc(changes, func(c plan.Change) bool {
		r := rec.refused[c.Attribute]
		return r != nil && r.Value == c.To && now.Before(r.Retry)
	})
}

// noteRefusals records the writes res shows refused (failed, or not kept)
// with their next retry time, forgets those that worked, and returns the
// attributes refused as before (same value, same error): not news.
func (d *Daemon) noteRefusals(rec *disk, res apply.Result) map[string]bool {
	var repeated map[string]bool
	now := time.Now()
	for _, o := range res.Outcomes {
		switch o.Status {
		case apply.Failed, apply.Mismatch:
			msg := fmt.Sprint(o.Err)
			if o.Status == apply.Mismatch {
				msg = "the kernel kept " + o.Got
			}
			old := rec.refused[o.Attribute]
			if old != nil && old.Value == o.To && old.Error == msg {
				if repeated == nil {
					repeated = map[string]bool{}
				}
				repeated[o.Attribute] = true
				old.backoff = min(2*old.backoff, maxRefusalBackoff)
				old.Retry = now.Add(old.backoff)
				continue
			}
			if rec.refused == nil {
				rec.refused = map[string]*refusal{}
			}
			rec.refused[o.Attribute] = &refusal{
				Refusal: statefile.Refusal{Attribute: o.Attribute, Value: o.To, Error: msg, Since: now, Retry: now.Add(refusalBackoff)},
				backoff: refusalBackoff,
			}
		default:
			delete(rec.refused, o.Attribute)
		}
	}
	return repeated
}

// record returns the disk's record, creating it on first sight.
func (d *Daemon) record(name sysfs.Name) *disk {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := d.disks[name.String()]
	if rec == nil {
		rec = &disk{d: d, name: name}
		d.disks[name.String()] = rec
	}
	return rec
}

// recordOf is the disk's record, nil when the daemon has none.
func (d *Daemon) recordOf(name string) *disk {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.disks[name]
}

// records lists the records, for a walk over them without Daemon.mu.
func (d *Daemon) records() []*disk {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*disk, 0, len(d.disks))
	for _, rec := range d.disks {
		out = append(out, rec)
	}
	return out
}

// renew forgets what rec remembers of the disk that had its name before:
// what it settled (or the new disk's first writes would be logged as
// drift), its snapshot, its refusals, what runs for it (teardown), and its
// udev properties unless props (this pass's event's) are the new disk's.
func (d *Daemon) renew(rec *disk, props map[string]string) {
	d.mu.Lock()
	rec.state = statefile.DiskState{}
	d.mu.Unlock()
	rec.snap, rec.props, rec.refused = nil, props, nil
	rec.teardown(diskReplaced)
	d.log.Debug("another disk under the same name", "device", rec.name.String())
}

// forget drops a disk that went away: its record (with its refusals) and
// what runs or is kept for it (teardown). A disk without a record (never
// passed over) is torn down too: its original values may be remembered
// from an earlier run.
func (d *Daemon) forget(name sysfs.Name) {
	d.mu.Lock()
	rec, known := d.disks[name.String()]
	delete(d.disks, name.String())
	d.mu.Unlock()
	if !known {
		rec = &disk{d: d, name: name}
	}
	rec.teardown(diskGone)
	if known {
		d.log.Debug("disk removed", "device", name.String())
		d.markChanged()
	}
}

// ending is why teardown ends what runs for a disk.
type ending int

const (
	diskGone      ending = iota // removed: nothing of it is kept
	diskReplaced                // another disk has its name: nothing of it is kept
	noRuleMatches               // its original values stay owed to restore_on_exit
	daemonStops                 // its original values are restored next
)

func (e ending) String() string {
	return [...]string{"it went away", "another disk has its name", "no rule matches it", "the daemon stops"}[e]
}

// teardown is the one way what runs or is kept for the disk beside its
// record ends, in this order: its probe is cancelled first (it puts back
// what it changed; its hold on the disk ends once it has) and its
// decision and last failure forgotten, then its adaptive controller stops
// (no switch is asked for after), then its observer; their series go
// from the metrics; last, for a disk gone or replaced, its original values
// are forgotten (they are another disk's, or no disk's). Each part does
// nothing for a record without it. Called from the disk's own pass, or at
// stop once no pass writes.
func (rec *disk) teardown(why ending) {
	d, name := rec.d, rec.name.String()
	rec.cancelProbe()
	d.metrics.ForgetProbe(name)
	d.dropAdaptive(rec, why.String())
	d.dropObserved(rec)
	if d.orig != nil && (why == diskGone || why == diskReplaced) {
		d.orig.Forget(name)
	}
}

// teardownAll is teardown of every disk remembered, at stop.
func (d *Daemon) teardownAll() {
	for _, rec := range d.records() {
		rec.teardown(daemonStops)
	}
}

// knownNames lists the disks the daemon remembers.
func (d *Daemon) knownNames() map[sysfs.Name]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[sysfs.Name]bool, len(d.disks))
	for _, rec := range d.disks {
		out[rec.name] = true
	}
	return out
}

// scanResult is one pass over every disk.
type scanResult struct {
	reason string
	// reloads is loop.reloads when the scan started: it re-planned every
	// disk under the policies taken by those reloads.
	reloads int
	disks   int
	writes  int64
	took    time.Duration
}

// scan passes over every disk listed in sysfs and every disk remembered (one
// removed while events were lost is found gone and forgotten), in parallel,
// and returns once all those passes are done. A disk never seen gets a full
// pass whatever kind is asked.
func (d *Daemon) scan(kind passKind, reason string) scanResult {
	start := time.Now()
	d.metrics.Rescan(rescanReason(reason))
	writes := d.writes.Load()
	names, err := d.pipe.Names()
	if err != nil {
		d.log.Error("listing disks", "error", err)
	}
	known := d.knownNames()
	wg := new(tasks.Barrier)
	for _, n := range names {
		k := kind
		if !known[n] {
			k = full
		}
		delete(known, n)
		d.kick(n, k, nil, wg)
	}
	for n := range known {
		d.kick(n, full, nil, wg)
	}
	if !wg.WaitFor(d.cfg.ScanTimeout) {
		// The disks still busy get their pass when their write returns;
		// the scan (and the READY, reload and rescans behind it) goes on.
		d.log.Warn("scan: some disks are still being written after the scan timeout; going on without them", "reason", reason, "timeout", d.cfg.ScanTimeout, "busy", d.queue.Busy())
	}
	return scanResult{reason: reason, disks: len(names), writes: d.writes.Load() - writes, took: time.Since(start)}
}
