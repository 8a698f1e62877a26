package daemon

import (
	"context"

	"github.com/iosched/iosched/internal/policywatch"
	"github.com/iosched/iosched/internal/tasks"
)

// followPolicy starts following the policy's files (package policywatch):
// a change, once the files are quiet, reloads the policy the way SIGHUP
// does (read off the event loop; an invalid policy leaves the old one in
// force). An inotify instance that cannot be had (the per-user limit
// reached) leaves the daemon to SIGHUP, with a warning.
func (d *Daemon) followPolicy() {
	if d.cfg.NoPolicyFollow {
		return
	}
	w, err := policywatch.New(policywatch.Options{Path: d.cfg.PolicyPath, Debounce: d.cfg.hooks.policyDebounce, Log: d.log})
	if err != nil {
		d.log.Warn("not following the policy files; reload with SIGHUP", "error", err)
		return
	}
	d.policyChanged = w.Changed()
	d.policyFollowed.Store(true)
	// Its failure leaves the daemon to SIGHUP: logged, not an error that
	// stops the daemon.
	d.tasks.Start(tasks.Func("policy follower", func(ctx context.Context) error {
		if err := w.Run(ctx); err != nil {
			d.policyFollowed.Store(false)
			d.log.Error("following the policy files stopped; reload with SIGHUP", "error", err)
			d.markChanged()
		}
		return nil
	}))
}
