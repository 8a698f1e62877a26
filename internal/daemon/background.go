package daemon

import (
	"context"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/iosched/iosched/internal/procs"
)

// ask is what a background task asks of the loop, on Daemon.asks: the
// loop alone changes its state (which scan runs, the load under way), so
// a timer or follower that wants something done asks for it.
type ask int

const (
	askReconcile  ask = iota // the reconcile interval went by
	askReload                // the policy's files changed
	askTasksReady            // every task Run started is ready
	askWatchdog              // time to tell systemd the loop is alive
)

// tell hands a to the loop, unless the daemon is stopping (ctx done).
func (d *Daemon) tell(ctx context.Context, a ask) {
	select {
	case d.asks <- a:
	case <-ctx.Done():
	}
}

// startBackground starts the tasks that run beside the loop: the state
// writer, the reconcile timer, the watchdog, the thread release, and the
// wait for every task's readiness. It returns what stops the state writer,
// which the stop calls before it removes the state file.
func (d *Daemon) startBackground() (stopStateWriter func()) {
	ready := d.tasks.Ready()
	d.tasks.Do("ready wait", func(ctx context.Context) {
		select {
		case <-ready:
			d.tell(ctx, askTasksReady)
		case <-ctx.Done():
		}
	})
	d.tasks.Do("reconcile timer", d.reconcileTimer)
	// The ping goes through the loop, so a loop stuck anywhere stops the
	// pings and systemd restarts the daemon.
	if iv, err := sd.SdWatchdogEnabled(false); err != nil {
		d.log.Warn("watchdog", "error", err)
	} else if iv > 0 {
		d.tasks.Do("watchdog", func(ctx context.Context) { d.every(ctx, iv/2, askWatchdog) })
	}
	if d.policyChanged != nil {
		d.tasks.Do("policy changes", func(ctx context.Context) {
			for {
				select {
				case <-d.policyChanged:
					d.tell(ctx, askReload)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	d.tasks.Do("thread release", d.releaseThreads)
	quit, done := make(chan struct{}), make(chan struct{})
	d.tasks.Do("state writer", func(context.Context) {
		defer close(done)
		d.writeStates(quit)
	})
	stopped := false
	return func() {
		if !stopped {
			stopped = true
			close(quit)
			<-done
		}
	}
}

// every asks a of the loop every interval until ctx is done.
func (d *Daemon) every(ctx context.Context, interval time.Duration, a ask) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			d.tell(ctx, a)
		case <-ctx.Done():
			return
		}
	}
}

// reconcileTimer asks for a reconcile every policy's reconcile_interval
// (none when it is 0); a reload restarts it with the new policy's
// (Daemon.resetReconcile).
func (d *Daemon) reconcileTimer(ctx context.Context) {
	tick, stop := ticker(d.policy.Load().Daemon.ReconcileInterval)
	defer func() { stop() }()
	for {
		select {
		case <-tick:
			d.tell(ctx, askReconcile)
		case <-d.reconcileReset:
			stop()
			tick, stop = ticker(d.policy.Load().Daemon.ReconcileInterval)
		case <-ctx.Done():
			return
		}
	}
}

// resetReconcile restarts the reconcile interval under the policy now in
// force.
func (d *Daemon) resetReconcile() {
	select {
	case d.reconcileReset <- struct{}{}:
	default: // a reset is pending: it reads the policy then
	}
}

// releaseThreads ends the threads a burst left behind shortly
// (releaseDelay) after it, unless another burst is running by then (its
// own end asks again).
func (d *Daemon) releaseThreads(ctx context.Context) {
	var release <-chan time.Time
	for {
		select {
		case <-d.burstOver:
			release = time.After(releaseDelay)
		case <-release:
			release = nil
			// Not in the middle of the next burst: it needs those
			// threads, and the memory given back would be faulted in
			// again; its end asks again. A few passes running (one
			// hung in the kernel, say) do not hold the release back.
			if d.queue.Running() <= procs.KeepThreads() {
				procs.ReleaseThreads()
			}
		case <-ctx.Done():
			return
		}
	}
}

// releaseDelay: long enough that the queue going idle for a moment in the
// middle of a burst (the next events not read yet) does not end threads
// about to be needed again, short enough that the burst's memory is not
// still held when the next thing comes (the reconcile after it, say).
const releaseDelay = 100 * time.Millisecond

// writeStates keeps the state file up to date until quit: a change
// (markChanged) is written a little later (stateDebounce), so that 1000
// disks changing at once make a few writes, not 1000; systemd hears the
// STATUS= line when it changed.
func (d *Daemon) writeStates(quit <-chan struct{}) {
	var due <-chan time.Time
	status := ""
	for {
		select {
		case <-d.changed:
			if due == nil {
				due = time.After(d.cfg.hooks.stateDebounce)
				d.stateDue.Store(true)
			}
		case <-due:
			due = nil
			// Before the write reads the state: a change made from
			// now on is not in it, and asks for the next.
			d.stateDue.Store(false)
			if err := d.writeState(); err != nil {
				d.log.Error("writing the state file", "error", err)
			}
			if s := d.statusLine(); s != status {
				status = s
				d.notify(s)
			}
		case <-quit:
			return
		}
	}
}
