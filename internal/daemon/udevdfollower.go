// The daemon's view of udevd in kernel mode: the
// events udevd is done with, whether udevd runs, and the udev rules that
// write a disk's settings, read when a log line or a pass needs them.
//
// The daemon acts on the kernel's uevent within milliseconds; udevd acts on
// the same uevent later, and a udev rule that writes a queue attribute
// (ATTR{queue/scheduler}="bfq") then undoes the policy on a hot-plugged
// disk until the next reconcile. udevd re-broadcasts each event once it has run every rule (and
// RUN program) for it, on the udev netlink group: the daemon listens there
// too and checks the disk again, read-only, writing only what moved. No
// udevd, no message: an idle daemon still costs nothing.

package daemon

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iosched/iosched/internal/conflicts"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/uevent"
)

// Follower follows udevd for the daemon. Its methods are safe for
// concurrent use, Listen excepted (called once, before the others).
type Follower struct {
	// mon hears udevd's processed add and change events of whole disks
	// (UdevDone set), or the news that some were lost. nil when not
	// following (udev mode: the main socket is udevd's already).
	mon *uevent.Monitor
	// heard is when udevd's last event came: udevd runs. mon.Heard
	// when following.
	heard func() time.Time

	rulesRoot     string // where the rules are read
	controlSocket string // udevd's control socket
	log           *slog.Logger
	// control is the last look for udevd's control socket.
	control atomic.Pointer[controlCheck]

	mu     sync.Mutex
	rules  *conflicts.Set
	loaded time.Time

	// graces are the timers AfterGrace armed, stopped (and those firing
	// waited for) by StopGraces.
	graceMu     sync.Mutex
	graces      map[*time.Timer]struct{}
	gracesEnded bool
	graceFiring sync.WaitGroup
}

// newUdevdFollower returns a Follower that reads the udev rules under rulesRoot and
// asks controlSocket whether udevd runs. It follows no events until
// Listen.
func newUdevdFollower(rulesRoot, controlSocket string, log *slog.Logger) *Follower {
	return &Follower{rulesRoot: rulesRoot, controlSocket: controlSocket, log: log}
}

// Listen starts following udevd's processed events through dial, and
// returns the monitor, for the caller to run as a task.
func (f *Follower) Listen(dial uevent.Dialer) (*uevent.Monitor, error) {
	mon, err := uevent.Listen(uevent.Options{Source: uevent.UdevDone, Dial: dial, Log: f.log.With("socket", "udevd"), Buffer: 256})
	if err != nil {
		return nil, err
	}
	f.mon, f.heard = mon, mon.Heard
	return mon, nil
}

// Following reports whether udevd's events are followed.
func (f *Follower) Following() bool { return f.mon != nil }

// Heard is when udevd's last processed event came, zero when none did or
// when not following.
func (f *Follower) Heard() time.Time {
	if f.heard == nil {
		return time.Time{}
	}
	return f.heard()
}

// Events are udevd's processed events when following, nil (never ready)
// otherwise.
func (f *Follower) Events() <-chan uevent.Event {
	if f.mon == nil {
		return nil
	}
	return f.mon.Events()
}

// DefaultGrace is how long a disk left to udevd waits for udevd's event
// before the daemon acts anyway (udevd may be stuck, or the rule may not
// apply after all). It must be longer than udevd takes for a burst of new
// disks (contrib/bench/README.md, "Constants").
const DefaultGrace = 2 * time.Second

// AfterGrace runs fn after wait, unless StopGraces comes first.
func (f *Follower) AfterGrace(wait time.Duration, fn func()) {
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

// StopGraces stops the pending grace timers, waits for any firing, and
// refuses new ones.
func (f *Follower) StopGraces() {
	f.graceMu.Lock()
	f.gracesEnded = true
	for t := range f.graces {
		t.Stop()
	}
	f.graces = nil
	f.graceMu.Unlock()
	f.graceFiring.Wait()
}

// controlCheck is a look for udevd's control socket: when, and why udevd
// did not answer there (nil: it did).
type controlCheck struct {
	at  time.Time
	err error
}

// NoUdevd tells whether udevd runs (nil) or why it seems not to: udevd
// runs when its event came in the last ten minutes, or it answers on its
// control socket: a socket file alone may be one a udevd that is gone left
// behind. The socket is tried at most once a second, so a burst of new
// disks costs no system call more. It is the one answer for both the pass
// that leaves a disk to udevd and the warning that no udevd runs.
func (f *Follower) NoUdevd() error {
	now := time.Now()
	if t := f.Heard(); !t.IsZero() && now.Sub(t) < 10*time.Minute {
		return nil
	}
	if c := f.control.Load(); c != nil && now.Sub(c.at) < time.Second {
		return c.err
	}
	err := uevent.UdevdAnswers(f.controlSocket)
	f.control.Store(&controlCheck{at: now, err: err})
	return err
}

// rulesMaxAge bounds how long rules read for a log line are trusted: an
// admin who edits a rule and reloads udevd sees the new file named.
const rulesMaxAge = time.Minute

// Rules returns the udev rules, read when they were not in the last
// minute.
func (f *Follower) Rules() *conflicts.Set {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil || time.Since(f.loaded) > rulesMaxAge {
		set, err := conflicts.Load(f.rulesRoot)
		if err != nil {
			f.log.Debug("reading udev rules", "error", err)
		}
		f.rules, f.loaded = set, time.Now()
	}
	return f.rules
}

// RulesChanging names the udev rules ("FILE:LINE") that could write an
// attribute p changes on dev.
func (f *Follower) RulesChanging(dev *sysfs.Device, p plan.Plan) []string {
	rules := f.Rules()
	if rules.Empty() {
		return nil
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
	return found
}

// RulesWriting names the udev rules that could have written value to attr
// on dev ("FILE:LINE", ...), reading the rules when they were not read in
// the last minute; "" when none is found.
func (f *Follower) RulesWriting(dev *sysfs.Device, attr, value string) string {
	var found []string
	for _, w := range f.Rules().For(dev) {
		if w.Kind == conflicts.UdevRule && w.Attribute == attr && w.Value == value {
			found = append(found, w.Where())
		}
	}
	return strings.Join(found, ", ")
}
