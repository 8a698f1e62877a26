package daemon

// Following udevd in kernel mode. The daemon acts on the kernel's uevent
// within milliseconds; udevd acts on the same uevent later, and a udev rule
// that writes a queue attribute (ATTR{queue/scheduler}="bfq") then undoes
// the policy: with such a rule and 20 hot-plugged loops, 14 to 20 ended on
// the rule's value, until the next reconcile. udevd re-broadcasts each
// event once it has run every rule (and RUN program) for it, on the udev
// netlink group: the daemon listens there too and checks the disk again,
// read-only, writing only what moved. No udevd, no message: an idle daemon
// still costs nothing.

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/conflicts"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/sysfs"
	"github.com/iosched/iosched/uevent"
)

// udevFollow is the daemon's view of udevd in kernel mode: the events udevd
// is done with, and the udev rules, read when a log line needs them.
type udevFollow struct {
	// mon hears udevd's processed add and change events of whole disks
	// (UdevDone set), or the news that some were lost. nil when not
	// following (udev mode: the main socket is udevd's already).
	mon *uevent.Monitor
	// heard is when udevd's last event came: udevd runs. mon.Heard
	// when following.
	heard func() time.Time

	root string // where the rules are read
	// control is the last look for udevd's control socket.
	control atomic.Pointer[controlCheck]

	mu     sync.Mutex
	rules  *conflicts.Set
	loaded time.Time

	// graces are the udevdGrace timers pending, stopped (and those
	// firing waited for) by stopGraces, so none fires after Run.
	graceMu     sync.Mutex
	graces      map[*time.Timer]struct{}
	gracesEnded bool
	graceFiring sync.WaitGroup
}

// afterGrace runs fn after wait, unless stopGraces comes first.
func (f *udevFollow) afterGrace(wait time.Duration, fn func()) {
	f.graceMu.Lock()
	defer f.graceMu.Unlock()
	if f.gracesEnded {
		return
	}
	if f.graces == nil {
		f.graces = map[*time.Timer]struct{}{}
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		f.graceMu.Lock()
		delete(f.graces, t)
		ended := f.gracesEnded
		if !ended {
			f.graceFiring.Add(1)
		}
		f.graceMu.Unlock()
		if !ended {
			fn()
			f.graceFiring.Done()
		}
	})
	f.graces[t] = struct{}{}
}

// stopGraces stops the pending grace timers, waits for any firing, and
// refuses new ones.
func (f *udevFollow) stopGraces() {
	f.graceMu.Lock()
	f.gracesEnded = true
	for t := range f.graces {
		t.Stop()
	}
	f.graces = nil
	f.graceMu.Unlock()
	f.graceFiring.Wait()
}

// rulesMaxAge bounds how long rules read for a log line are trusted: an
// admin who edits a rule and reloads udevd sees the new file named.
const rulesMaxAge = time.Minute

// followUdev starts following udevd's processed events, in kernel mode
// only (d.udev false). A socket that cannot be opened leaves the daemon as
// it was (the policy may then be undone by a udev rule until the next
// reconcile), and says so.
func (d *Daemon) followUdev() {
	d.follow.root = d.cfg.RulesRoot
	if d.udev || d.cfg.followDial == nil {
		return
	}
	mon, err := uevent.Listen(uevent.Options{Source: uevent.UdevDone, Dial: d.cfg.followDial, Log: d.log.With("socket", "udevd"), Buffer: 256})
	if err != nil {
		d.log.Warn("cannot follow udevd's events: a udev rule that writes a queue setting may undo the policy until the next reconcile", "error", err)
		return
	}
	d.follow.mon, d.follow.heard = mon, mon.Heard
	d.tasks.start(mon)
}

// events are udevd's processed events when following, nil (never ready)
// otherwise.
func (f *udevFollow) events() <-chan uevent.Event {
	if f.mon == nil {
		return nil
	}
	return f.mon.Events()
}

// recheck asks for a check of a disk udevd is done with: a settingsOnly
// pass reads the few attributes the policy sets and writes only those that
// moved. Lost udevd events: every disk is checked.
func (d *Daemon) recheck(l *eventLoop, ev uevent.Event) {
	if ev.Lost {
		l.scan(settingsOnly, "udevd events lost")
		return
	}
	d.queue.kick(ev.Name, settingsOnly, &ev, nil)
}

// udevdGrace is how long a disk left to udevd waits for udevd's event
// before the daemon acts anyway (udevd may be stuck, or the rule may not
// apply after all): udevd handled 1000 new disks at once in 1.2-1.4 s on a
// 2 vCPU guest (contrib/bench/README.md).
const udevdGrace = 2 * time.Second

// leaveToUdevd tells whether a pass asked for by a kernel uevent should
// leave the disk alone until udevd is done with the same event: when
// udevd runs and one of its rules could write a setting this plan makes.
// Writing first would be undone by the rule, cost a queue freeze more
// each way, and race udevd's own write: two scheduler switches at once on
// one queue oopsed kernel 6.18.44 in blk_mq_free_rqs (sysfs: "cannot
// create duplicate filename .../queue/iosched") and left the disk
// impossible to remove (contrib/bench/README.md, "Two scheduler switches
// at once on one queue oops this kernel"). udevd's processed event brings the pass that
// writes; if none comes within udevdGrace, a pass is asked for anyway.
func (d *Daemon) leaveToUdevd(dev *sysfs.Device, p plan.Device, j job) bool {
	if !j.kernelEvent || j.afterUdev || d.follow.mon == nil || d.noUdevd() != nil {
		return false
	}
	rules := d.udevRules()
	if rules.Empty() {
		return false
	}
	var found []string
	for _, w := range rules.For(dev) {
		if w.Kind != conflicts.UdevRule {
			continue
		}
		for _, c := range p.Changes {
			if c.Attribute == w.Attribute {
				found = append(found, w.Where())
				break
			}
		}
	}
	if len(found) == 0 {
		return false
	}
	name := dev.Name
	grace := d.cfg.udevdGrace
	if grace <= 0 {
		grace = udevdGrace
	}
	d.follow.afterGrace(grace, func() { d.queue.kick(name, settingsOnly, nil, nil) })
	d.log.Debug("left to udevd first: its rules write what the policy sets", "device", name, "udev_rule", strings.Join(found, ", "))
	return true
}

// controlCheck is a look for udevd's control socket: when, and why udevd
// did not answer there (nil: it did).
type controlCheck struct {
	at  time.Time
	err error
}

// noUdevd tells whether udevd runs (nil) or why it seems not to: udevd
// runs when its event came in the last ten minutes, or it answers on its
// control socket (Config.UdevControl): a socket file alone may be one a
// udevd that is gone left behind. The socket is tried at most once a
// second, so a burst of new disks costs no system call more. It is the one
// answer for both the pass that leaves a disk to udevd and the warning
// that no udevd runs.
func (d *Daemon) noUdevd() error {
	f := &d.follow
	now := time.Now()
	if f.heard != nil {
		if t := f.heard(); !t.IsZero() && now.Sub(t) < 10*time.Minute {
			return nil
		}
	}
	if c := f.control.Load(); c != nil && now.Sub(c.at) < time.Second {
		return c.err
	}
	err := uevent.UdevdAnswers(d.cfg.UdevControl)
	f.control.Store(&controlCheck{at: now, err: err})
	return err
}

// udevRules returns the udev rules, read when they were not in the last
// minute.
func (d *Daemon) udevRules() *conflicts.Set {
	f := &d.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil || time.Since(f.loaded) > rulesMaxAge {
		set, err := conflicts.Load(f.root)
		if err != nil {
			d.log.Debug("reading udev rules", "error", err)
		}
		f.rules, f.loaded = set, time.Now()
	}
	return f.rules
}

// udevRulesWriting names the udev rules that could have written value to
// attr on dev ("FILE:LINE", ...), reading the rules when they were not read
// in the last minute; "" when none is found.
func (d *Daemon) udevRulesWriting(dev *sysfs.Device, attr, value string) string {
	var found []string
	for _, w := range d.udevRules().For(dev) {
		if w.Kind == conflicts.UdevRule && w.Attribute == attr && w.Value == value {
			found = append(found, w.Where())
		}
	}
	return strings.Join(found, ", ")
}

// logUdevOverride logs a write made by a pass after udevd was done with the
// disk, when udevd's handling is what moved the value: a udev rule that
// writes the value found, or a value the last pass had left as the policy
// wants. It reports whether it logged; otherwise the write is an ordinary
// one.
func (d *Daemon) logUdevOverride(dev *sysfs.Device, o apply.Outcome, drift bool, attrs []any) bool {
	rules := d.udevRulesWriting(dev, o.Attribute, o.Before)
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
	if d.follow.mon == nil {
		return false
	}
	rules := d.udevRulesWriting(dev, o.Attribute, o.Got)
	if rules == "" {
		return false
	}
	d.log.Info("a udev rule wrote another value right after this one; it is put back once udevd is done with the disk",
		append(attrs, "got", o.Got, "udev_rule", rules)...)
	return true
}
