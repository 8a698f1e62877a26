package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/policy"
)

// loadResult is a policy read off the loop, or a read that did not finish
// within LoadTimeout (timedOut).
type loadResult struct {
	seq      int // which load: a late answer to one given up on is dropped
	pol      *policy.Policy
	err      error
	timedOut bool
}

// load reads the policy on a goroutine of its own and sends the result, or
// that it did not come within LoadTimeout, to d.loaded, or to out when set.
// A read that does not finish (a policy on a hung network filesystem) is
// left to finish on its own: nothing can interrupt it.
func (d *Daemon) load(seq int, out chan<- loadResult) {
	if out == nil {
		out = d.loaded
	}
	read := make(chan loadResult, 1) // never blocks a read that finishes late
	d.tasks.Do("policy load", func(context.Context) {
		pol, err := d.cfg.Load(d.cfg.PolicyPath)
		read <- loadResult{seq: seq, pol: pol, err: err}
	})
	d.tasks.Do("policy load deadline", func(ctx context.Context) {
		timeout := time.NewTimer(d.cfg.LoadTimeout)
		defer timeout.Stop()
		var r loadResult
		select {
		case r = <-read:
		case <-timeout.C:
			r = loadResult{seq: seq, timedOut: true}
		case <-ctx.Done():
			return
		}
		select {
		case out <- r:
		case <-ctx.Done(): // no one waits any more
		}
	})
}

// loadAtStart reads the policy, bounded by LoadTimeout. A stop asked
// meanwhile returns nil, nil.
func (d *Daemon) loadAtStart(ctx context.Context, signals <-chan os.Signal) (*policy.Policy, error) {
	out := make(chan loadResult, 1)
	d.load(0, out)
	for {
		select {
		case r := <-out:
			if r.timedOut {
				return nil, &PolicyError{fmt.Errorf("%w within %s", errLoadTimeout, d.cfg.LoadTimeout)}
			}
			if r.err != nil {
				return nil, &PolicyError{r.err}
			}
			return r.pol, nil
		case sig := <-signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				d.log.Info("stopping while the policy loads", "signal", sig.String())
				return nil, nil
			}
		case <-ctx.Done():
			return nil, nil
		}
	}
}

var errLoadTimeout = errors.New("policy: reading it did not finish")

// ErrUdevUnreachable is a start refused in udev mode where udevd's events
// cannot arrive: the daemon runs in a network namespace of its own.
var ErrUdevUnreachable = errors.New("udev mode cannot work in a private network namespace")

// refuseUdevMode is the error that refuses udev mode in a private network
// namespace, naming what to do instead.
func refuseUdevMode(why string) error {
	return fmt.Errorf("%w (%s): udevd's events do not reach this process. "+
		"Run it in the host's network namespace (the unit's drop-in /usr/share/iosched/udev-mode.conf does so), "+
		`or set [daemon] uevent_source = "kernel": the kernel's uevents reach a private network namespace too`, ErrUdevUnreachable, why)
}

func (d *Daemon) ueventSource(pol *policy.Policy) string {
	if d.cfg.UeventSource != "" {
		return d.cfg.UeventSource
	}
	if pol.Daemon.UeventSource == "" {
		return "kernel"
	}
	return pol.Daemon.UeventSource
}

// reloaded takes a policy read on SIGHUP, or records why it was refused; it
// reports whether it was taken. The loop re-plans and tells systemd when it
// is done (loop.loaded).
func (d *Daemon) reloaded(pol *policy.Policy, err error, requests []string) bool {
	if err != nil {
		lines := ErrorLines(err)
		for _, line := range lines {
			d.log.Error("policy reload failed; the previous policy stays in force", "error", line)
		}
		d.noteReload(false, lines, requests)
		d.metrics.Reloaded(err)
		return false
	}
	old := d.policy.Load()
	if d.cfg.UeventSource == "" && pol.Daemon.UeventSource != old.Daemon.UeventSource {
		d.log.Warn("uevent_source changes take effect when the daemon restarts", "running", d.ueventSource(old))
	}
	d.setPolicy(pol)
	d.reloadProbes(pol)
	d.useMetrics(pol)
	d.noteReload(true, nil, requests)
	d.metrics.Reloaded(nil)
	d.log.Info("policy reloaded; re-planning every disk", "policy", pol.Sources)
	return true
}

func (d *Daemon) setPolicy(p *policy.Policy) {
	d.checkSeeds(p)
	d.policy.Store(p)
	d.mu.Lock()
	d.report.Policy = p
	d.mu.Unlock()
	d.markChanged()
}
