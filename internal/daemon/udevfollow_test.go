package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/ueventtest"
)

// followedDaemon runs a daemon on a fake tree whose udevd socket the test
// feeds, with a udev rule that sets bfq on its loops under rulesRoot.
func followedDaemon(t *testing.T, mods ...func(*Config)) (r *running, kernel, udevd *ueventtest.Conn) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/udev/rules.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "etc/udev/rules.d/99-bfq.rules"),
		"# the rule under test\nACTION==\"add|change\", SUBSYSTEM==\"block\", KERNEL==\"loop2[0-3][0-9][0-9][0-9]\", ATTR{queue/scheduler}=\"bfq\"\n")
	udevd = ueventtest.NewConn()
	ud := newFakeDialer(udevd)
	r, kernel = fakeDaemonWith(t, testPolicy(""), func(c *Config) {
		c.hooks.followDial = ud.dial
		c.RulesRoot = root
		for _, m := range mods {
			m(c)
		}
	}, "loop20000")
	return r, kernel, udevd
}

// udevd is done with a disk after the daemon set it: the daemon checks it
// again and puts back what a udev rule changed, naming the rule.
func TestDaemonFollowsUdevd(t *testing.T) {
	t.Parallel()
	r, _, udevd := followedDaemon(t)
	sched := filepath.Join(r.d.cfg.FS.Root(), "block/loop20000/queue/scheduler")
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")

	// The rule ran: bfq. udevd says it is done.
	writeFile(t, sched, "none mq-deadline kyber [bfq]\n")
	udevd.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("change", "loop20000", "disk")}
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	// The log names the udev rule that overrode the policy, which no
	// outcome shows: that naming is the behaviour, so the log is asserted.
	waitFor(t, 5*time.Second, "the override to be logged", func() bool {
		return len(r.log.Lines(`msg="a udev rule overrode the policy; put back"`, "device=loop20000", "attribute=scheduler",
			"from=bfq", "to=mq-deadline", "udev_rule=/etc/udev/rules.d/99-bfq.rules:2")) == 1
	})
	if n := len(r.log.Lines("drift repaired")); n != 0 {
		t.Errorf("the override also logged as drift (%d lines)", n)
	}

	// Only what moved is written: udevd's event for a disk in policy
	// reads and writes nothing.
	mark, passes := r.writes.Len(), r.passCount("loop20000")
	udevd.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("change", "loop20000", "disk")}
	r.waitPassesOf(t, "loop20000", passes+1) // the pass udevd's event asks for
	if w := r.writes.Since(mark); len(w) != 0 {
		t.Errorf("writes after udevd's event on a disk in policy: %v", w)
	}

	// Changed to a value no rule read writes: said so, and put back.
	writeFile(t, sched, "none mq-deadline [kyber] bfq\n")
	udevd.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("change", "loop20000", "disk")}
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	waitFor(t, 5*time.Second, "the change put back in the state file", func() bool {
		c := r.state(t).LastChange
		return c != nil && c.Device == "loop20000" && c.Attribute == "scheduler" && c.From == "kyber" && c.To == "mq-deadline" && c.Drift
	})

	// Lost udevd events: every disk is checked.
	writeFile(t, sched, "none mq-deadline kyber [bfq]\n")
	udevd.Msgs <- ueventtest.Msg{Err: syscall.ENOBUFS}
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	waitFor(t, 5*time.Second, "the rescan in the state file", func() bool {
		sc := r.state(t).LastScan
		return sc != nil && sc.Reason == "udevd events lost"
	})
	r.noErrors(t)
}

// In udev mode the daemon's own socket is udevd's: nothing more is opened.
func TestDaemonUdevModeDoesNotFollowTwice(t *testing.T) {
	t.Parallel()
	ud := newFakeDialer()
	r, _ := fakeDaemonWith(t, testPolicy("[daemon]\nuevent_source = \"udev\"\n"), func(c *Config) { c.hooks.followDial = ud.dial }, "loop20000")
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	if n := ud.Count(); n != 0 {
		t.Errorf("udev mode opened %d more sockets", n)
	}
}

// While udevd runs, a new disk that one of its rules writes is left to
// udevd first: the daemon writes once udevd is done (no two scheduler
// switches at once on one queue), or after a grace if udevd says nothing.
// Scans are not held back.
func TestDaemonLeavesDiskToUdevdFirst(t *testing.T) {
	t.Parallel()
	r, kernel, udevd := followedDaemon(t, func(c *Config) { c.hooks.udevdGrace = 300 * time.Millisecond })
	root := r.d.cfg.FS.Root()
	// udevd is heard: it runs.
	udevd.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("change", "loop20000", "disk")}
	waitFor(t, 5*time.Second, "udevd to be heard", func() bool { return !r.d.follow.Heard().IsZero() })

	addFakeDisk(t, root, "loop20001", 1)
	kernel.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitPassesOf(t, "loop20001", 1) // the pass that leaves it to udevd
	if w := r.writes.Of("loop20001", ""); len(w) != 0 {
		t.Fatalf("loop20001 written before udevd was done: %v", w)
	}
	if got := r.attr(t, "loop20001", "scheduler"); got != "none" {
		t.Fatalf("loop20001 written before udevd was done: scheduler %s", got)
	}
	writeFile(t, filepath.Join(root, "block/loop20001/queue/scheduler"), "none mq-deadline kyber [bfq]\n")
	udevd.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "scheduler", "mq-deadline")
	waitFor(t, 5*time.Second, "loop20001's two writes", func() bool { return len(r.writes.Of("loop20001", "")) >= 2 })
	if d := applytest.Diff(r.writes.Of("loop20001", ""), []applytest.Write{
		applytest.W("loop20001", "scheduler", "mq-deadline"), applytest.W("loop20001", "nr_requests", "64"),
	}); d != "" {
		t.Errorf("loop20001 once udevd is done: %s", d)
	}
	// The pass logs its writes once they are all done: after the value.
	// The log names the udev rule, which no outcome shows.
	waitFor(t, 5*time.Second, "the override to be logged once, naming the rule", func() bool {
		return len(r.log.Lines("a udev rule overrode the policy", "device=loop20001", "from=bfq", "udev_rule=/etc/udev/rules.d/99-bfq.rules:2")) == 1
	})

	// udevd says nothing: written after the grace.
	addFakeDisk(t, root, "loop20002", 2)
	start := time.Now()
	kernel.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20002", "disk")}
	r.waitAttr(t, "loop20002", "scheduler", "mq-deadline")
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("loop20002 written %s after its uevent, before the grace", took)
	}

	// A reconcile is not held back.
	writeFile(t, filepath.Join(root, "block/loop20000/queue/scheduler"), "none mq-deadline kyber [bfq]\n")
	start = time.Now()
	r.signals <- syscall.SIGUSR1
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("the reconcile waited %s", took)
	}

}
