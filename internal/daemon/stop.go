package daemon

import (
	"errors"
	"fmt"
	"os"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/iosched/iosched/internal/restore"
	"github.com/iosched/iosched/internal/statefile"
)

// passGrace is how long a stop waits, past StopTimeout, for the passes it
// abandoned to return from the writes they are in.
const passGrace = time.Second

// StopBound is the longest Run takes from SIGTERM to its return with
// stopTimeout as Config.StopTimeout: the probes and passes in flight share
// stopTimeout, abandoned passes get passGrace more, the restore of
// original values (restore_on_exit) stopTimeout and restore.Grace, the
// tasks taskGrace. The systemd unit's TimeoutStopSec must be above it
// (packaging/unit_test.go checks), or systemd kills the daemon in the
// middle of its restore.
//
// The process can outlive it, and no signal shortens that: a write to a
// disk whose queue is frozen behind I/O the disk does not answer waits in
// the kernel (blk_mq_freeze_queue_wait, block/blk-mq.c) uninterruptibly,
// and a process exits only once all its threads have left the kernel. Run
// gives up on such a write in time and logs the disk as not restored; the
// process then ends when the disk answers.
func StopBound(stopTimeout time.Duration) time.Duration {
	return stopTimeout + passGrace + stopTimeout + restore.Grace + taskGrace
}

// stop abandons the scans and passes not yet writing, lets the writes in
// flight finish (bounded by StopTimeout), puts the original values back when
// the policy asks, and removes the state file. Without restore_on_exit the
// settings stay: they are what the policy wants, a restart (an upgrade)
// should not flap every disk through the kernel's defaults and back, and
// each switch would freeze the disk's queue.
func (d *Daemon) stop(stopStateWriter func()) error {
	d.stopping.Store(true)
	// Nothing writes the state file once the stop has begun: it is
	// removed at the end.
	stopStateWriter()
	d.notify(sd.SdNotifyStopping)
	deadline := time.Now().Add(d.cfg.StopTimeout) // probes and passes share it
	// Every disk's probe is cancelled (it puts back what it changed),
	// and its adaptive controller stops switching it: nothing switches a
	// disk under the restore below.
	d.teardownAll()
	if left := d.tasks.WaitFor(d.cfg.StopTimeout, isProbeTask); len(left) > 0 {
		d.log.Warn("a probe was still restoring its disk at stop", "probes", left, "waited", d.cfg.StopTimeout)
	}
	done := d.queue.Close()
	var writing []string // disks whose pass may still write
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		d.log.Warn("passes still running at stop; abandoning their remaining writes", "waited", d.cfg.StopTimeout)
		d.stopPasses()
		select {
		case <-done:
		case <-time.After(passGrace):
			// Stuck in a write (a queue frozen behind a dead
			// device): restoring the disk would race with it.
			writing = d.queue.Busy()
		}
	}
	d.follow.StopGraces() // no pass is asked for after Run
	var err error
	if d.policy.Load().Daemon.RestoreOnExit && d.orig != nil {
		applier := d.applier
		if d.cfg.hooks.restoreTarget != nil {
			applier.FS = d.cfg.hooks.restoreTarget(applier.FS)
		}
		failed := d.orig.Restore(restore.Stop{Writing: writing, ProbeRuns: d.probeHolds, Locks: d.locks,
			Applier: applier, Timeout: d.cfg.StopTimeout, InFlight: d.inFlight, Log: d.log})
		if failed > 0 {
			// restore_on_exit promised the original values: a stop
			// that could not keep the promise is a failed stop, for
			// systemd (the unit shows failed) and for whoever stopped it.
			err = fmt.Errorf("%w: %d disk(s), named in the log above; the values known stay remembered in %s for the next start",
				ErrNotRestored, failed, d.cfg.StateDir)
			d.log.Error("stopping with disks not restored; exit status 1", "failed", failed)
		}
	}
	for _, w := range d.inFlight.All() {
		d.log.Warn("left at stop: a write still in the kernel (the disk has not answered); it finishes on its own", "device", w.Disk, "write", w.What, "since", w.Since.Format(time.RFC3339))
	}
	if err := os.Remove(statefile.Path(d.cfg.RuntimeDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("removing the state file", "error", err)
	}
	return err
}

// ErrNotRestored is a stop with restore_on_exit that could not put back
// every disk's original values (a write that failed or did not return,
// values unknown): Run returns it, and the process exits 1.
var ErrNotRestored = errors.New("restore_on_exit: not every disk's original values were restored")
