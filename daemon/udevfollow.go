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
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/sysfs"
	"github.com/iosched/iosched/writers"
)

// udevFollow is the daemon's view of udevd in kernel mode: the events udevd
// is done with, and the udev rules, read when a log line needs them.
type udevFollow struct {
	// events are udevd's processed add and change events of whole disks
	// (udevDone set), or the news that some were lost. nil when not
	// following (udev mode: the main socket is udevd's already).
	events chan event

	root string // where the rules are read
	// heard is when udevd's last event came (UnixNano): udevd runs.
	heard atomic.Int64
	// control is the last look for udevd's control socket.
	control atomic.Pointer[controlCheck]

	mu     sync.Mutex
	rules  *writers.Set
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

// followUdev returns a listener for udevd's processed events, in kernel
// mode only (nil otherwise). A socket that cannot be opened leaves the
// daemon as it was (the policy may then be undone by a udev rule until the
// next reconcile), and says so.
func (d *Daemon) followUdev(udevMode bool) *listener {
	d.follow.root = d.cfg.RulesRoot
	if udevMode || d.cfg.followDial == nil {
		return nil
	}
	c, err := d.cfg.followDial(true)
	if err != nil {
		d.log.Warn("cannot follow udevd's events: a udev rule that writes a queue setting may undo the policy until the next reconcile", "error", err)
		return nil
	}
	d.follow.events = make(chan event, 256)
	return &listener{
		dial: d.cfg.followDial, udev: true, log: d.log.With("socket", "udevd"), out: d.follow.events, c: c,
		parse: func(raw []byte) (event, bool, error) {
			ev, ok := parseUdevdEvent(raw)
			return ev, ok, nil
		},
		heard: &d.follow.heard,
	}
}

// recheck asks for a check of a disk udevd is done with: a settingsOnly
// pass reads the few attributes the policy sets and writes only those that
// moved. Lost udevd events: every disk is checked.
func (d *Daemon) recheck(l *loop, ev event) {
	if ev.lost {
		l.scan(settingsOnly, "udevd events lost")
		return
	}
	d.queue.kick(ev.name, settingsOnly, &ev, nil)
}

// libudev's monitor header (systemd src/libsystemd/sd-device/device-monitor.c
// monitor_netlink_header): "libudev\0", a magic number in network byte
// order, then the header size and the properties' offset in host order.
const (
	udevdMagic        = 0xfeedcafe
	udevdHeaderLength = 40
)

// parseUdevdEvent keeps an add or change of a whole disk from udevd's
// message. It reads only the properties it needs, in place: go-udev's
// ParseUEvent would build a map of all of them, kilobytes a disk in a
// burst. Properties are NUL-terminated KEY=value strings.
func parseUdevdEvent(raw []byte) (event, bool) {
	if !bytes.Contains(raw, []byte("SUBSYSTEM=block\x00")) || len(raw) < udevdHeaderLength ||
		!bytes.HasPrefix(raw, []byte("libudev\x00")) || binary.BigEndian.Uint32(raw[8:]) != udevdMagic {
		return event{}, false
	}
	header := binary.NativeEndian.Uint32(raw[12:])
	off := binary.NativeEndian.Uint32(raw[16:])
	if header < udevdHeaderLength || header > uint32(len(raw)) || off < header || off >= uint32(len(raw)) {
		return event{}, false
	}
	var v ueventVars
	if v.scan(raw[off:], true) != nil || (v.action != "add" && v.action != "change") {
		return event{}, false
	}
	ev, ok, err := v.diskEvent()
	if !ok || err != nil {
		return event{}, false
	}
	ev.udevDone = true
	return ev, true
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
	if !j.kernelEvent || j.afterUdev || d.follow.events == nil || d.noUdevd() != nil {
		return false
	}
	rules := d.udevRules()
	if rules.Empty() {
		return false
	}
	var found []string
	for _, w := range rules.For(dev) {
		if w.Kind != writers.UdevRule {
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

// controlCheck is a look for udevd's control socket: when, and why it was
// not there (nil: it was).
type controlCheck struct {
	at  time.Time
	err error
}

// noUdevd tells whether udevd runs (nil) or why it seems not to: udevd
// runs when its event came in the last ten minutes, or its control socket
// (Config.UdevControl) exists. The socket is looked for at most once a
// second, so a burst of new disks costs no system call more. It is the one
// answer for both the pass that leaves a disk to udevd and the warning
// that no udevd runs.
func (d *Daemon) noUdevd() error {
	f := &d.follow
	now := time.Now()
	if t := f.heard.Load(); t != 0 && now.Sub(time.Unix(0, t)) < 10*time.Minute {
		return nil
	}
	if c := f.control.Load(); c != nil && now.Sub(c.at) < time.Second {
		return c.err
	}
	_, err := os.Stat(d.cfg.UdevControl)
	f.control.Store(&controlCheck{at: now, err: err})
	return err
}

// udevRules returns the udev rules, read when they were not in the last
// minute.
func (d *Daemon) udevRules() *writers.Set {
	f := &d.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil || time.Since(f.loaded) > rulesMaxAge {
		set, err := writers.Load(f.root)
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
		if w.Kind == writers.UdevRule && w.Attribute == attr && w.Value == value {
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
	if d.follow.events == nil {
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
