package daemon

import (
	"context"
	"strconv"
	"time"

	"github.com/iosched/iosched/internal/metrics"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file runs the rules' observe key: each disk a rule with it matches
// has its stat file sampled at that interval, and its busy time by
// in-flight depth goes to the metrics file for the fleet's view. Nothing
// of it runs without an observed disk: the sampler task starts with the
// first and ends with the last.

// sampler is a task sampling the disks whose record has a part of its
// kind (an adaptive controller, an observer): it runs while one has.
type sampler struct {
	// running: the task runs (under Daemon.mu); it clears it when it
	// ends.
	running bool
	// wake tells the task that a disk came or its interval changed, so
	// that its schedule is computed again.
	wake chan struct{}
}

func newSampler() sampler { return sampler{wake: make(chan struct{}, 1)} }

// startSampler starts s's task, run, unless it runs (or the daemon
// stops), and wakes it. Called once the record's part is set and the
// record's lock let go: the task, ending, has either found the part or
// cleared running first.
func (d *Daemon) startSampler(s *sampler, name string, run func(context.Context)) {
	d.mu.Lock()
	if !s.running && !d.stopping.Load() {
		s.running = true
		d.tasks.Do(name, run)
	}
	d.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// runSampler is a sampler's task: it sleeps until the next record is due
// (next: when the record's part samples next, nil for a record without
// the part), calls sampleDue, and ends once no record has the part, or
// the daemon stops (closePart then closes each part's stat file).
func (d *Daemon) runSampler(ctx context.Context, s *sampler, next func(*disk) *time.Time, sampleDue func(time.Time), closePart func(*disk)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		var due time.Time
		for _, rec := range d.disks {
			rec.mu.Lock()
			if t := next(rec); t != nil && (due.IsZero() || t.Before(due)) {
				due = *t
			}
			rec.mu.Unlock()
		}
		if due.IsZero() || ctx.Err() != nil {
			s.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		timer.Reset(time.Until(due))
		select {
		case <-timer.C:
			sampleDue(time.Now())
		case <-s.wake:
			timer.Stop() // Reset above starts it again
		case <-ctx.Done():
			d.mu.Lock()
			s.running = false
			for _, rec := range d.disks {
				rec.mu.Lock()
				closePart(rec)
				rec.mu.Unlock()
			}
			d.mu.Unlock()
			return
		}
	}
}

// observedDisk is one observed disk and what the sampler keeps.
type observedDisk struct {
	interval time.Duration
	obs      *observe.Observer // nil until opened, and after a failed read
	// depths is the disk's totals: they outlive a reopened stat file,
	// so that the counters only grow while the daemon runs.
	depths observe.Depths
	// shown: the metrics have depths as they are (an idle disk's sample
	// changes nothing and gives the recorder nothing to compare).
	shown bool
	next  time.Time
}

// observeDisk starts, keeps or stops observing dev as the policy says.
// Called from the disk's pass.
func (d *Daemon) observeDisk(pol *policy.Policy, rec *disk, dev *sysfs.Device) {
	interval, _ := pol.ObserveFor(dev)
	if interval <= 0 {
		d.dropObserved(rec)
		return
	}
	d.metrics.SetDiskInfo(dev.Name, diskInfo(d.pipe, dev))
	rec.mu.Lock()
	x := rec.observed
	if x != nil && x.interval == interval {
		rec.mu.Unlock()
		return
	}
	if x == nil {
		x = &observedDisk{}
		rec.observed = x
	}
	x.interval = interval
	x.next = nextSample(time.Now(), interval)
	rec.mu.Unlock()
	d.startSampler(&d.observe, "observe sampler", d.sampleObserved)
}

// dropObserved stops observing the disk, if it was, and drops its series.
func (d *Daemon) dropObserved(rec *disk) {
	rec.mu.Lock()
	x := rec.observed
	if x != nil {
		x.close()
		rec.observed = nil
	}
	rec.mu.Unlock()
	if x != nil {
		d.metrics.ForgetObserved(rec.name.String())
	}
}

func (x *observedDisk) close() {
	if x.obs != nil {
		x.obs.Close()
		x.obs = nil
	}
}

// sampleObserved is the sampler task: it sleeps until the next disk is
// due, samples every disk due then, and ends once no disk is observed (or
// the daemon stops).
func (d *Daemon) sampleObserved(ctx context.Context) {
	d.runSampler(ctx, &d.observe, func(rec *disk) *time.Time {
		if rec.observed == nil {
			return nil
		}
		return &rec.observed.next
	}, d.sampleObservedDue, func(rec *disk) {
		if rec.observed != nil {
			rec.observed.close()
		}
	})
}

// sampleObservedDue samples every observed disk due by now and gives the
// metrics the totals that changed. A pass over idle disks allocates
// nothing per disk: the CPU target (0.5% of one CPU for 1000 disks at
// 5 s) leaves a sample a few microseconds, most of them the read.
func (d *Daemon) sampleObservedDue(now time.Time) {
	defer d.metrics.Hold()() // the pass's figures in one write, after it
	for _, rec := range d.records() {
		rec.mu.Lock()
		if x := rec.observed; x != nil && !x.next.After(now) {
			if d.sampleObservedDisk(rec.name, x, now) && !x.shown {
				// Under the record's lock, so that an observer
				// dropped meanwhile (its series forgotten after) gets
				// no series back.
				d.metrics.SetBusyDepths(rec.name.String(), busyDepths(x.depths))
				x.shown = true
			}
		}
		rec.mu.Unlock()
	}
}

// sampleObservedDisk samples the observed disk x (disk's, due), under its
// record's lock, into its totals (clearing x.shown when they changed);
// false when its stat file could not be read.
func (d *Daemon) sampleObservedDisk(disk sysfs.Name, x *observedDisk, now time.Time) bool {
	x.next = nextSample(now, x.interval)
	if x.obs == nil {
		obs, err := observe.NewObserver(d.pipe.StatPath(disk))
		if err != nil {
			d.log.Debug("observe: the disk's stat file", "device", disk.String(), "error", err)
			return false
		}
		x.obs = obs
	}
	before := x.obs.Depths()
	if err := x.obs.Step(); err != nil {
		// Gone, most likely: its pass forgets it.
		d.log.Debug("observe: reading the disk's stat file", "device", disk.String(), "error", err)
		x.close()
		return false
	}
	if after := x.obs.Depths(); after != before {
		x.depths = addDepths(x.depths, before, after)
		x.shown = false
	}
	return true
}

// addDepths adds to total what an observer accumulated from before to
// after (a reopened observer starts from zero again).
func addDepths(total, before, after observe.Depths) observe.Depths {
	for i := range total.Busy {
		total.Busy[i] += after.Busy[i] - before.Busy[i]
	}
	total.Sum += after.Sum - before.Sum
	total.Reads += after.Reads - before.Reads
	total.Writes += after.Writes - before.Writes
	return total
}

// busyDepths is the metrics' form of a disk's totals.
func busyDepths(dp observe.Depths) metrics.BusyDepths {
	cum := dp.Cumulative()
	return metrics.BusyDepths{Bounds: observe.DepthBounds[:], Cumulative: cum[:], Sum: dp.Sum, Reads: dp.Reads, Writes: dp.Writes}
}

// diskInfo is what the metrics say of an observed disk: its probe key and
// that key's parts.
func diskInfo(p *pipeline.Pipeline, dev *sysfs.Device) metrics.DiskInfo {
	k, rot := p.Identity(dev)
	return metrics.DiskInfo{Key: k.String(), Class: k.Class, Driver: k.Driver, Model: k.Model,
		HWQueues: strconv.Itoa(k.HWQueues), Rotational: rot}
}
