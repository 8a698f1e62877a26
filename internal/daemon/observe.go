package daemon

import (
	"context"
	"strconv"
	"sync"
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

// observing is the daemon's observed disks, under its own mutex (taken
// after Daemon.mu, never before).
type observing struct {
	mu    sync.Mutex
	disks map[string]*observedDisk
	// sampling: the sampler task runs; it clears it when it ends.
	sampling bool
	// wake tells the sampler that a disk came or its interval changed.
	wake chan struct{}
}

// observedDisk is one observed disk and what the sampler keeps.
type observedDisk struct {
	interval time.Duration
	obs      *observe.Observer // nil until opened, and after a failed read
	// depths is the disk's totals: they outlive a reopened stat file,
	// so that the counters only grow while the daemon runs.
	depths observe.Depths
	next   time.Time
}

// observeDisk starts, keeps or stops observing dev as the policy says.
// Called from the disk's pass.
func (d *Daemon) observeDisk(pol *policy.Policy, dev *sysfs.Device) {
	interval, _ := pol.ObserveFor(dev)
	if interval <= 0 {
		d.dropObserved(dev.Name)
		return
	}
	o := &d.observed
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.disks == nil {
		o.disks = map[string]*observedDisk{}
		o.wake = make(chan struct{}, 1)
	}
	d.metrics.SetDiskInfo(dev.Name, diskInfo(d.pipe, dev))
	x := o.disks[dev.Name]
	if x != nil && x.interval == interval {
		return
	}
	if x == nil {
		x = &observedDisk{}
		o.disks[dev.Name] = x
	}
	x.interval = interval
	x.next = nextSample(time.Now(), interval)
	if !o.sampling && !d.stopping.Load() {
		o.sampling = true
		d.tasks.Do("observe sampler", d.sampleObserved)
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// dropObserved stops observing the disk, if it was, and drops its series.
func (d *Daemon) dropObserved(name string) {
	o := &d.observed
	o.mu.Lock()
	x := o.disks[name]
	if x != nil {
		x.close()
		delete(o.disks, name)
	}
	o.mu.Unlock()
	if x != nil {
		d.metrics.ForgetObserved(name)
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
	o := &d.observed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop := func() {
		o.mu.Lock()
		for _, x := range o.disks {
			x.close()
		}
		o.sampling = false
		o.mu.Unlock()
	}
	for {
		o.mu.Lock()
		var due time.Time
		for _, x := range o.disks {
			if due.IsZero() || x.next.Before(due) {
				due = x.next
			}
		}
		if due.IsZero() || ctx.Err() != nil {
			o.sampling = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		timer.Reset(time.Until(due))
		select {
		case <-timer.C:
			d.sampleObservedDue(time.Now())
		case <-o.wake:
			timer.Stop() // Reset above starts it again
		case <-ctx.Done():
			stop()
			return
		}
	}
}

// sampleObservedDue samples every observed disk due by now and gives the
// metrics their totals.
func (d *Daemon) sampleObservedDue(now time.Time) {
	o := &d.observed
	type update struct {
		name   string
		depths observe.Depths
	}
	var updates []update
	o.mu.Lock()
	for name, x := range o.disks {
		if x.next.After(now) {
			continue
		}
		x.next = nextSample(now, x.interval)
		if x.obs == nil {
			obs, err := observe.NewObserver(d.pipe.StatPath(name))
			if err != nil {
				d.log.Debug("observe: the disk's stat file", "device", name, "error", err)
				continue
			}
			x.obs = obs
		}
		before := x.obs.Depths()
		if err := x.obs.Step(); err != nil {
			// Gone, most likely: its pass forgets it.
			d.log.Debug("observe: reading the disk's stat file", "device", name, "error", err)
			x.close()
			continue
		}
		x.depths = addDepths(x.depths, before, x.obs.Depths())
		updates = append(updates, update{name, x.depths})
	}
	o.mu.Unlock()
	for _, u := range updates {
		d.metrics.SetBusyDepths(u.name, busyDepths(u.depths))
	}
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
