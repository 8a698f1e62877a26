package daemon

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

func fakeDaemonWith(t *testing.T, policyText string, mod func(*Config), disks ...string) (*running, *ueventtest.Conn) {
	t.Helper()
	fs := fakeTree(t, disks...)
	c := ueventtest.NewConn()
	fd := newFakeDialer(c)
	r := start(t, policyText, func(cfg *Config) {
		cfg.FS = fs
		cfg.hooks.dial = fd.dial
		cfg.hooks.stateDebounce = 10 * time.Millisecond
		mod(cfg)
	})
	return r, c
}

// A reload adding a rule on a fact the old policy did not test (so the
// disks were not read for it) re-reads the disks for it.
func TestReloadReadsFactsTheNewPolicyTests(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy(""), "loop20000")
	writeFile(t, r.policy, testPolicy("")+`
[[rule]]
name = "ssd loops"
[rule.match]
name = ["loop2*"]
rotational = false
[rule.set]
read_ahead_kb = 4
`)
	r.replan(t, "the reload's re-plan", 5*time.Second)
	if got := r.attr(t, "loop20000", "read_ahead_kb"); got != "4" {
		t.Errorf("after a reload adding a rotational rule, read_ahead_kb = %s, want 4", got)
	}
}

// A reload adding a rule on nowait tests NOWAIT on the disks.
func TestReloadTestsNoWaitWhenItComesToMatter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	tested := map[string]bool{}
	r, _ := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) {
		cfg.hooks.evaluate = func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
			mu.Lock()
			if dev.NoWait != nil || dev.NoWaitReason != "" {
				tested[dev.Name] = true
			}
			mu.Unlock()
			return p.EvaluateUntil(dev, stop)
		}
	}, "loop20000")
	mu.Lock()
	if tested["loop20000"] {
		t.Error("NOWAIT tested although no rule tests it")
	}
	mu.Unlock()
	writeFile(t, r.policy, testPolicy("")+`
[[rule]]
name = "nowait ones"
[rule.match]
name = ["loop2*"]
nowait = false
[rule.set]
read_ahead_kb = 4
`)
	r.replan(t, "the reload's re-plan", 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if !tested["loop20000"] {
		t.Error("NOWAIT never tested for loop20000 after a reload made it matter")
	}
}

// One disk whose pass hangs (a write frozen behind a dead device) does not
// stall later scans: a disk whose add event was lost is still configured.
func TestStuckDiskDoesNotBlockLaterRescans(t *testing.T) {
	t.Parallel()
	var stuck atomic.Bool
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	r, c := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) {
		cfg.hooks.evaluate = func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
			if dev.Name == "loop20000" && stuck.Load() {
				entered <- struct{}{}
				<-release
			}
			return p.EvaluateUntil(dev, stop)
		}
		cfg.ScanTimeout = 300 * time.Millisecond
		cfg.StopTimeout = 500 * time.Millisecond
	}, "loop20000")
	defer close(release)
	stuck.Store(true)
	c.Msgs <- ueventtest.Msg{Err: syscall.ENOBUFS} // rescan 1: hangs on loop20000
	<-entered
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{Err: syscall.ENOBUFS} // loop20001's add was lost
	r.waitAttr(t, "loop20001", "scheduler", "mq-deadline")
	// A WARN an admin must see: a disk whose write hangs is named only
	// in the log (its pass is still in the kernel, so no state follows).
	if len(r.log.Lines("still being written after the scan timeout")) == 0 {
		t.Error("the stuck disk was not logged")
	}
}
