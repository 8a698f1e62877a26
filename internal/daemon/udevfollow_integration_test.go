package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/conflicts"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// This test's loop numbers (internal/looptest): 5900-5999, in blocks of 25:
// 20 loops the policy and the udev rule both match, and a control loop only
// the rule matches, to show what udevd does with no daemon in its way; the
// number after the control is where udevdRuleScheduler reads what loops
// offer, before udevd starts. The test takes the first block with no device in it: a loop left in the
// kernel by an earlier run must not fail the test, nor be written by it:
// two scheduler switches at once on one loop can oops the kernel and leave
// the loop impossible to remove (contrib/bench/README.md, "Two scheduler
// switches at once on one queue oops this kernel").
const (
	udevdLoops      = 20
	udevdRangeFirst = 5900
	udevdRangeEnd   = 6000
	udevdBlock      = 25
	// udevdTarget: every loop shows the policy's scheduler this soon
	// after its creation, or after a change event.
	udevdTarget = 3 * time.Second
)

// udevdNumbers picks the block: the policy's loops and the control loop.
func udevdNumbers(t *testing.T) (loops []int, control int) {
	t.Helper()
blocks:
	for first := udevdRangeFirst; first+udevdLoops < udevdRangeEnd; first += udevdBlock {
		for n := first; n <= first+udevdLoops+1; n++ {
			if _, err := os.Stat("/sys/block/" + looptest.Name(n)); !errors.Is(err, os.ErrNotExist) {
				continue blocks
			}
		}
		for n := first; n < first+udevdLoops; n++ {
			loops = append(loops, n)
		}
		return loops, first + udevdLoops
	}
	t.Fatalf("no block of %d free loop numbers in %d-%d", udevdLoops+2, udevdRangeFirst, udevdRangeEnd-1)
	return nil, 0
}

// udevdRuleScheduler is the scheduler the udev rule writes: one the loops
// offer other than the policy's mq-deadline (bfq where the kernel has it),
// read from loop n, created and removed again before udevd starts.
func udevdRuleScheduler(t *testing.T, n int) string {
	t.Helper()
	l := looptest.Add(t, n)
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	_, offered, err := fs.ReadScheduler(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	l.Remove(t)
	for _, s := range []string{"bfq", "kyber", "none"} {
		if slices.Contains(offered, s) && slices.Contains(offered, "mq-deadline") {
			return s
		}
	}
	t.Fatalf("loops offer %v: no scheduler besides the policy's mq-deadline for the udev rule to write over it", offered)
	return ""
}

// udevdSetup is the rule (every loop of the block, control included,
// writing sched) and the policy (the block's loops but not the control)
// for those numbers.
func udevdSetup(loops []int, control int, sched string) (rule, pol string) {
	var kernel, names []string
	for _, n := range append(slices.Clone(loops), control) {
		kernel = append(kernel, looptest.Name(n))
	}
	for _, n := range loops {
		names = append(names, strconv.Quote(looptest.Name(n)))
	}
	rule = `ACTION=="add|change", SUBSYSTEM=="block", KERNEL=="` + strings.Join(kernel, "|") + `", ATTR{queue/scheduler}="` + sched + `"`
	pol = `
[[rule]]
name = "udevd test loops"
[rule.match]
name = [` + strings.Join(names, ", ") + `]
[rule.set]
scheduler = "mq-deadline"

[daemon]
reconcile_interval = "0"
`
	return rule, pol
}

// TestIntegrationUdevdRuleDoesNotWin runs a real systemd-udevd, privately,
// with one rule that sets bfq (or, on a kernel without it, another
// scheduler the loops offer) on a block of 21 loops, and the daemon (kernel
// uevents, no reconcile) with mq-deadline for 20 of them. Each of the 20
// hot-plugged loops must show mq-deadline within 3 s of its creation and
// keep it; the same after a change event (udevadm trigger), which runs the
// rule again.
func TestIntegrationUdevdRuleDoesNotWin(t *testing.T) {
	requireLoops(t)
	loops, control := udevdNumbers(t)
	sched := udevdRuleScheduler(t, control+1)
	rule, pol := udevdSetup(loops, control, sched)
	udevd := startPrivateUdevd(t, rule)

	// The daemon names the rule from its own copy of the rules tree.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/udev/rules.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "etc/udev/rules.d/99-iosched-test.rules"), rule+"\n")
	// The daemon must know udevd runs before udevd's first event comes:
	// otherwise it writes the first loops at once, while udevd's workers
	// run the rule, and two scheduler switches at once on one queue oops
	// the kernel (blk_mq_free_rqs, after "cannot create duplicate
	// filename .../queue/iosched"; contrib/bench/README.md).
	r := start(t, pol, func(c *Config) {
		c.RulesRoot = root
		c.UdevControl = udevd.control()
	})
	if err := r.d.follow.NoUdevd(); err != nil {
		t.Fatalf("the private udevd does not answer on %s: %v", udevd.control(), err)
	}

	names := make([]string, udevdLoops)
	for i := range names {
		names[i] = looptest.Name(loops[i])
	}
	w := watchSchedulers(t, append(names, looptest.Name(control)))
	created := make([]time.Time, udevdLoops)
	for i := range names {
		created[i] = time.Now()
		looptest.Add(t, loops[i])
	}
	looptest.Add(t, control)
	udevd.settle(t)
	time.Sleep(udevdTarget) // the last loop's 3 s, and then some holding
	w.check(t, names, created, "hot-plug")
	if got := w.now(looptest.Name(control)); got != sched {
		t.Fatalf("the control loop (the rule, no policy) has %q: udevd did not run the rule", got)
	}
	// The log names the udev rule each put-back undid, which no outcome
	// shows: counted there.
	overrides := func() int {
		return len(r.log.Lines(`msg="a udev rule overrode the policy; put back"`, "from="+sched, "to=mq-deadline",
			"udev_rule=/etc/udev/rules.d/99-iosched-test.rules:1"))
	}
	t.Logf("hot-plug: %d of %d loops had %s from udevd put back", overrides(), udevdLoops, sched)

	// A change event runs the rule again on every loop.
	before := overrides()
	args := []string{"trigger", "--action=change"}
	for _, n := range names {
		args = append(args, "/sys/block/"+n)
	}
	at := time.Now()
	udevd.udevadm(t, args...)
	udevd.settle(t)
	time.Sleep(udevdTarget)
	changed := make([]time.Time, udevdLoops)
	for i := range changed {
		changed[i] = at
	}
	w.check(t, names, changed, "change")
	after := overrides() - before
	t.Logf("change: %d of %d loops had %s from udevd put back", after, udevdLoops, sched)
	if overrides() == 0 {
		t.Errorf("no override logged: udevd never wrote %s over the policy, so this test did not test it", sched)
	}
	r.noErrors(t)
}

// schedWatch polls the scheduler of some loops every 10 ms from its start
// to the test's end, and remembers when each last had another value than
// mq-deadline.
type schedWatch struct {
	mu      sync.Mutex
	lastBad map[string]time.Time
	last    map[string]string
}

func watchSchedulers(t *testing.T, names []string) *schedWatch {
	t.Helper()
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	w := &schedWatch{lastBad: map[string]time.Time{}, last: map[string]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, n := range names {
				active, _, err := fs.ReadScheduler(n)
				now := time.Now()
				w.mu.Lock()
				if err == nil {
					w.last[n] = active
				}
				if err == nil && active != "mq-deadline" {
					w.lastBad[n] = now
				}
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return w
}

func (w *schedWatch) now(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[name]
}

// check fails unless each loop had mq-deadline from its time + udevdTarget
// on, and has it now.
func (w *schedWatch) check(t *testing.T, names []string, since []time.Time, phase string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var worst time.Duration
	for i, n := range names {
		if w.last[n] != "mq-deadline" {
			t.Errorf("%s: %s has %q, want mq-deadline", phase, n, w.last[n])
		}
		bad := w.lastBad[n]
		if took := bad.Sub(since[i]); bad.After(since[i]) {
			worst = max(worst, took)
			if took >= udevdTarget {
				t.Errorf("%s: %s was still not on mq-deadline %s after its %s", phase, n, took.Round(time.Millisecond), phase)
			}
		}
	}
	t.Logf("%s: every loop on mq-deadline at most %s after its %s, and kept", phase, worst.Round(time.Millisecond), phase)
}

// privateUdevd is a systemd-udevd in a mount namespace of its own, where
// every rules directory holds only the test's rules and /run is empty: no
// rule of the machine runs, and nothing is left in /etc/udev or /run/udev.
type privateUdevd struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startPrivateUdevd starts it and returns once it answers. It is stopped
// when the test ends, and also when the test process dies: its shell kills
// it when its standard input, the test's pipe, closes.
func startPrivateUdevd(t *testing.T, rules string) *privateUdevd {
	t.Helper()
	bin := ""
	for _, p := range []string{"/lib/systemd/systemd-udevd", "/usr/lib/systemd/systemd-udevd"} {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	var missing []string
	if bin == "" {
		missing = append(missing, "systemd-udevd (Debian package udev)")
	}
	for _, tool := range []string{"unshare", "nsenter", "udevadm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		why := "this test needs " + strings.Join(missing, ", ")
		if os.Getenv("IOSCHED_INTEGRATION") == "required" {
			t.Fatal(why + " (IOSCHED_INTEGRATION=required)")
		}
		t.Skip(why)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "99-iosched-test.rules"), rules+"\n")
	// Every rules directory udevd reads is this one (or, /run, empty).
	mounts := "mount -t tmpfs -o mode=0755 tmpfs /run"
	for _, d := range conflicts.UdevRuleDirs() {
		if st, err := os.Stat(d); err == nil && st.IsDir() && !strings.HasPrefix(d, "/run/") {
			mounts += fmt.Sprintf(" && mount --bind %q %q", dir, d)
		}
	}
	script := mounts + ` && { "$1" & pid=$!; echo ready; read _; kill $pid; wait $pid; }`
	u := &privateUdevd{cmd: exec.Command("unshare", "-m", "--propagation", "private", "--", "sh", "-c", script, "sh", bin)}
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log ueventtest.LogBuffer
	u.cmd.Stderr = &log
	stdin, err := u.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u.stdin = stdin
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the shell kills udevd and waits for it
		done := make(chan error, 1)
		go func() { done <- u.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("the private udevd did not stop within 10 s: SIGKILL to its process group")
			syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("udevd's output:\n%s", tail(log.String(), 40))
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the private udevd did not start (%q, %v): %s", line, err, log.String())
	}
	waitFor(t, 10*time.Second, "the private udevd to answer", func() bool {
		return exec.Command("nsenter", "-t", fmt.Sprint(u.cmd.Process.Pid), "-m", "udevadm", "control", "--ping").Run() == nil
	})
	return u
}

// control is udevd's control socket seen from outside its mount namespace
// (its /run is a tmpfs of its own), through its shell's root.
func (u *privateUdevd) control() string {
	return fmt.Sprintf("/proc/%d/root/run/udev/control", u.cmd.Process.Pid)
}

// udevadm runs udevadm in udevd's mount namespace (its /run/udev).
func (u *privateUdevd) udevadm(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(u.cmd.Process.Pid), "-m", "udevadm"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("udevadm %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// settle waits until udevd has handled every event it received.
func (u *privateUdevd) settle(t *testing.T) { u.udevadm(t, "settle", "-t", "30") }
