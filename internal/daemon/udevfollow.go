package daemon

// What the daemon does with udevd in kernel mode (package udevfollow
// follows it): check a disk again once udevd is done with it, leave a new
// disk to udevd first when a rule of udevd's writes what the policy sets,
// and name the rule in the log when one undid the policy.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/uevent"
)

// followUdev starts following udevd's processed events, in kernel mode
// only (d.udev false). A socket that cannot be opened leaves the daemon as
// it was (the policy may then be undone by a udev rule until the next
// reconcile), and says so.
func (d *Daemon) followUdev() {
	if d.udev || d.cfg.hooks.followDial == nil {
		return
	}
	mon, err := d.follow.Listen(d.cfg.hooks.followDial)
	if err != nil {
		d.log.Warn("cannot follow udevd's events: a udev rule that writes a queue setting may undo the policy until the next reconcile", "error", err)
		return
	}
	d.tasks.Start(mon)
}

// recheck asks for a check of a disk udevd is done with: a settingsOnly
// pass reads the few attributes the policy sets and writes only those that
// moved. Lost udevd events: every disk is checked.
func (d *Daemon) recheck(l *eventLoop, ev uevent.Event) {
	if ev.Lost {
		l.scan(settingsOnly, "udevd events lost")
		return
	}
	d.kick(ev.Name, settingsOnly, &ev, nil)
}

// leaveToUdevd tells whether a pass asked for by a kernel uevent should
// leave the disk alone until udevd is done with the same event: when
// udevd runs and one of its rules could write a setting this plan makes.
// Writing first would be undone by the rule, cost a queue freeze more
// each way, and race udevd's own write: two scheduler switches at once on
// one queue can oops the kernel and leave the disk impossible to remove
// (contrib/bench/README.md, "Two scheduler switches at once on one queue
// oops this kernel"). udevd's processed event brings the pass that writes;
// if none comes within DefaultGrace, a pass is asked for anyway.
func (d *Daemon) leaveToUdevd(dev *sysfs.Device, p plan.Plan, j job) bool {
	if !j.kernelEvent || j.afterUdev || !d.follow.Following() || d.follow.NoUdevd() != nil {
		return false
	}
	found := d.follow.RulesChanging(dev, p)
	if len(found) == 0 {
		return false
	}
	name := dev.Name
	grace := d.cfg.hooks.udevdGrace
	if grace <= 0 {
		grace = DefaultGrace
	}
	d.follow.AfterGrace(grace, func() { d.kick(j.disk, settingsOnly, nil, nil) })
	d.log.Debug("left to udevd first: its rules write what the policy sets", "device", name, "udev_rule", strings.Join(found, ", "))
	return true
}

// logUdevOverride logs a write made by a pass after udevd was done with the
// disk, when udevd's handling is what moved the value: a udev rule that
// writes the value found, or a value the last pass had left as the policy
// wants. It reports whether it logged; otherwise the write is an ordinary
// one.
func (d *Daemon) logUdevOverride(dev *sysfs.Device, o apply.Outcome, drift bool, attrs []any) bool {
	rules := d.follow.RulesWriting(dev, o.Attribute, o.Before)
	switch {
	case rules != "":
		d.log.Warn("a udev rule overrode the policy; put back", append(attrs, "udev_rule", rules)...)
	case drift:
		d.log.Warn("changed while udevd handled the disk's event (no udev rule read writes this value); put back", attrs...)
	default:
		return false
	}
	return true
}

// logUdevRace logs a write whose read-back found another value, when
// following udevd and a udev rule writes that value: udevd wrote between
// the write and its read-back, and the check after udevd's event puts it
// right. It reports whether it logged.
func (d *Daemon) logUdevRace(dev *sysfs.Device, o apply.Outcome, attrs []any) bool {
	if !d.follow.Following() {
		return false
	}
	rules := d.follow.RulesWriting(dev, o.Attribute, o.Got)
	if rules == "" {
		return false
	}
	d.log.Info("a udev rule wrote another value right after this one; it is put back once udevd is done with the disk",
		append(attrs, "got", o.Got, "udev_rule", rules)...)
	return true
}

// checkUdev warns, in the log once and in the state for as long as it
// lasts, when the daemon listens to udevd's events and no udevd runs
// (nothing answers on its control socket: Follower.NoUdevd): hot-plugged disks
// would go unnoticed until the next reconcile or rescan.
func (d *Daemon) checkUdev() {
	pol := d.policy.Load()
	if pol == nil || d.ueventSource(pol) != "udev" {
		return
	}
	err := d.follow.NoUdevd()
	msg := ""
	if err != nil {
		msg = fmt.Sprintf("uevent_source is udev, but no udevd runs (%s: %v): disks that appear or change are not seen until the next reconcile", d.cfg.UdevControl, errors.Unwrap(err))
	}
	d.mu.Lock()
	old := d.report.UdevWarning
	d.report.UdevWarning = msg
	d.mu.Unlock()
	if msg != old {
		if msg != "" {
			d.log.Warn("no udevd runs: hot-plugged disks are seen only at the next reconcile", "control_socket", d.cfg.UdevControl)
		} else {
			d.log.Info("udevd runs again", "control_socket", d.cfg.UdevControl)
		}
		d.markChanged()
	}
}
