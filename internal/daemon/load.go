package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/daemonstate"
	"github.com/iosched/iosched/internal/policy"
)

// loadResult is a policy read off the loop.
type loadResult struct {
	seq int // which load: a late answer to one given up on is dropped
	pol *policy.Policy
	err error
}

// load reads the policy on a goroutine of its own and sends the result to
// d.loaded, or to out when set.
func (d *Daemon) load(seq int, out chan<- loadResult) {
	if out == nil {
		out = d.loaded
	}
	d.tasks.Do("policy load", func(ctx context.Context) {
		pol, err := d.cfg.Load(d.cfg.PolicyPath)
		select {
		case out <- loadResult{seq: seq, pol: pol, err: err}:
		case <-ctx.Done(): // no one waits any more
		}
	})
}

// loadAtStart reads the policy, bounded by LoadTimeout. A stop asked
// meanwhile returns nil, nil.
func (d *Daemon) loadAtStart(ctx context.Context, signals <-chan os.Signal) (*policy.Policy, error) {
	out := make(chan loadResult, 1)
	d.load(0, out)
	timeout := time.NewTimer(d.cfg.LoadTimeout)
	defer timeout.Stop()
	for {
		select {
		case r := <-out:
			if r.err != nil {
				return nil, &PolicyError{r.err}
			}
			return r.pol, nil
		case <-timeout.C:
			return nil, &PolicyError{fmt.Errorf("%w within %s", errLoadTimeout, d.cfg.LoadTimeout)}
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
		lines := daemonstate.ErrorLines(err)
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
	d.probes.reload(pol)
	d.useMetrics(pol)
	d.noteReload(true, nil, requests)
	d.metrics.Reloaded(nil)
	d.log.Info("policy reloaded; re-planning every disk", "policy", pol.Sources)
	return true
}

func (d *Daemon) setPolicy(p *policy.Policy) {
	d.policy.Store(p)
	d.mu.Lock()
	d.report.Policy = p
	d.mu.Unlock()
	d.markChanged()
}
