package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/ueventtest"
)

// TestMain lets a test run the daemon as a child process of the test
// binary (IOSCHED_TEST_DAEMON=1), so it can be stopped with SIGSTOP.
func TestMain(m *testing.M) {
	if os.Getenv("IOSCHED_TEST_DAEMON") == "1" {
		d, err := New(Config{
			PolicyPath: os.Getenv("IOSCHED_TEST_POLICY"),
			RuntimeDir: os.Getenv("IOSCHED_TEST_RUNTIME_DIR"),
			StateDir:   os.Getenv("IOSCHED_TEST_STATE_DIR"),
			LockFile:   os.Getenv("IOSCHED_TEST_LOCK_FILE"),
			Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
		})
		if err == nil {
			err = d.Run(context.Background())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a daemon running in a child process.
type child struct {
	cmd        *exec.Cmd
	log        *ueventtest.LogBuffer
	runtimeDir string
}

func startChild(t *testing.T, policyText string) *child {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.toml")
	writeFile(t, policy, policyText)
	c := &child{log: &ueventtest.LogBuffer{}, runtimeDir: filepath.Join(dir, "run")}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	notify := newNotifySocket(t)
	c.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.path, "IOSCHED_TEST_DAEMON=1", "IOSCHED_TEST_POLICY="+policy,
		"IOSCHED_TEST_RUNTIME_DIR="+c.runtimeDir, "IOSCHED_TEST_STATE_DIR="+filepath.Join(dir, "state"), "IOSCHED_TEST_LOCK_FILE="+filepath.Join(dir, "disks.lock"))
	c.cmd.Stderr = c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon exited: %v", err)
			}
		case <-time.After(20 * time.Second):
			c.cmd.Process.Kill()
			t.Error("daemon did not stop on SIGTERM within 20 s")
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", tail(c.log.String(), 60))
		}
	})
	// Ready as systemd learns it: READY=1 on the notify socket.
	deadline := time.After(30 * time.Second)
	for ready := false; !ready; {
		select {
		case m := <-notify.msgs:
			ready = strings.Contains(m, "READY=1")
		case <-deadline:
			t.Fatal("the daemon did not send READY=1 within 30 s")
		}
	}
	return c
}

// TestIntegrationHotPlug: 200 loop devices created while the daemon runs all
// converge; removed again, the daemon forgets them and still works.
func TestIntegrationHotPlug(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy(""))
	names := loops(t, loopBase, 200)
	took := waitConverged(t, names, 30*time.Second)
	t.Logf("200 hot-plugged loops converged %s after the last was created", took)
	// Each disk's scheduler written once. A write is recorded once it
	// returns: the last disks seen converged may not be recorded yet.
	written := func() (n int) {
		for _, name := range names {
			n += len(r.writes.Of(name, "scheduler"))
		}
		return n
	}
	eventually.Within(5*time.Second, func() bool { return written() >= 200 })
	if n := written(); n != 200 {
		t.Errorf("%d scheduler writes for 200 disks", n)
	}
	for _, name := range names {
		if d := applytest.Diff(r.writes.Of(name, "scheduler"), []applytest.Write{applytest.W(name, "scheduler", "mq-deadline")}); d != "" {
			t.Errorf("%s: %s", name, d)
			break
		}
	}

	removeLoops(t, loopBase, 200)
	waitFor(t, 10*time.Second, "the removed disks to be forgotten", func() bool {
		st, err := statefile.Read(r.runtimeDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if st.Disks[n] != nil {
				return false
			}
		}
		return true
	})
	// Still listening: one more converges.
	waitConverged(t, loops(t, loopBase+300, 1), 10*time.Second)
	r.noErrors(t)
}

// TestIntegrationOverflow: while the daemon is stopped (SIGSTOP), 2000 loop
// devices appear and each gets several change events, far more than the
// socket's receive buffer holds. Continued, the daemon learns events were
// lost, rescans, and every device converges.
func TestIntegrationOverflow(t *testing.T) {
	requireLoops(t)
	c := startChild(t, testPolicy(""))
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	names := loops(t, 21000, 2000)
	created := time.Since(start)
	for range 3 {
		for _, n := range names {
			if err := os.WriteFile("/sys/block/"+n+"/uevent", []byte("change"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("2000 loops created in %s, 6000 change events in %s", created, time.Since(start)-created)
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	took := waitConverged(t, names, 60*time.Second)
	t.Logf("converged %s after SIGCONT", took)
	// The daemon rescans only after events were lost: a burst that did
	// not overflow the socket buffer would prove nothing.
	var scan *statefile.Scan
	waitFor(t, 30*time.Second, "the state file to show the rescan after lost events", func() bool {
		st, err := statefile.Read(c.runtimeDir)
		if err == nil && st.LastScan != nil && st.LastScan.Reason == "lost uevents" {
			scan = st.LastScan
		}
		return scan != nil
	})
	t.Logf("rescan after lost events: %d disks, %d writes, %.3f s", scan.Disks, scan.Writes, scan.Seconds)
}

// TestIntegrationReload: a broken policy leaves the old in force (shown on a
// device created afterwards); a good one re-plans every device.
func TestIntegrationReload(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy(""))
	first := loops(t, 22000, 20)
	waitConverged(t, first, 10*time.Second)

	writeFile(t, r.policy, testPolicy("")+"\n[[rule]]\nname = \"broken\"\n[rule.match]\nclass = \"floppy\"\n")
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the state to show the failed reload", func() bool {
		st := r.state(t)
		return st.LastReload != nil && !st.LastReload.OK && len(st.LastReload.Errors) > 0 && strings.Contains(st.LastReload.Errors[0], "class")
	})
	later := loops(t, 22100, 5)
	waitConverged(t, later, 10*time.Second) // the old policy, on a new device

	writeFile(t, r.policy, strings.Replace(testPolicy(""), `scheduler = "mq-deadline"`, `scheduler = "kyber"`, 1))
	r.signals <- syscall.SIGHUP
	all := append(first, later...)
	waitFor(t, 10*time.Second, "every device re-planned to kyber", func() bool {
		for _, n := range all {
			b, _ := os.ReadFile("/sys/block/" + n + "/queue/scheduler")
			if !strings.Contains(string(b), "[kyber]") {
				return false
			}
		}
		return true
	})
}

// TestIntegrationDrift: a managed scheduler changed by hand is put back
// within the reconcile interval, and the log says so.
func TestIntegrationDrift(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy("[daemon]\nreconcile_interval = \"300ms\"\n"))
	names := loops(t, 22200, 3)
	waitConverged(t, names, 10*time.Second)
	if err := os.WriteFile("/sys/block/"+names[1]+"/queue/scheduler", []byte("none"), 0); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waitConverged(t, names, 5*time.Second)
	if took := time.Since(changed); took > 2*time.Second {
		t.Errorf("drift repaired after %s, interval 300ms", took)
	}
	waitFor(t, 2*time.Second, "the state file to show the drift repaired", func() bool {
		c := r.state(t).LastChange
		// The switch resets nr_requests, put back after it: the last
		// change may be either.
		return c != nil && c.Drift && c.Device == names[1]
	})
	if d := applytest.Diff(r.writes.Of(names[1], "scheduler"), []applytest.Write{
		applytest.W(names[1], "scheduler", "mq-deadline"), applytest.W(names[1], "scheduler", "mq-deadline"),
	}); d != "" {
		t.Errorf("set, then the drift repaired: %s", d)
	}
}

// TestIntegrationForgedUevent: a uevent a process sends to the kernel's
// multicast group is dropped (and logged), where the same event from the
// kernel is acted on.
func TestIntegrationForgedUevent(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy(`[daemon]
reconcile_interval = "0"`))
	name := loops(t, 22300, 1)[0]
	waitConverged(t, []string{name}, 10*time.Second)
	// Put it off policy; nothing but an event makes the daemon look again.
	if err := os.WriteFile("/sys/block/"+name+"/queue/scheduler", []byte("none"), 0); err != nil {
		t.Fatal(err)
	}
	sendForged(t, fmt.Sprintf("change@/devices/virtual/block/%[1]s\x00ACTION=change\x00DEVPATH=/devices/virtual/block/%[1]s\x00SUBSYSTEM=block\x00DEVNAME=%[1]s\x00DEVTYPE=disk\x00SEQNUM=1\x00", name))
	// The listener drops a message or passes it on, never both: once the
	// drop is logged, the forged event can have started nothing. The log
	// is asserted: a forged uevent is a WARN an admin must see (someone
	// on the machine sends them), and nothing else records the drop.
	waitFor(t, 5*time.Second, "the forged event to be logged", func() bool {
		return len(r.log.Lines("dropped a forged uevent")) > 0
	})
	if b, _ := os.ReadFile("/sys/block/" + name + "/queue/scheduler"); !strings.Contains(string(b), "[none]") {
		t.Fatalf("the daemon acted on a forged uevent: scheduler %s", b)
	}
	// The kernel's own event for the same device is acted on.
	if err := os.WriteFile("/sys/block/"+name+"/uevent", []byte("change"), 0); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, []string{name}, 5*time.Second)
}

// sendForged multicasts msg to the kernel uevent group from this process.
func sendForged(t *testing.T, msg string) {
	t.Helper()
	multicast(t, 1, []byte(msg))
}

// multicast sends msg to a uevent netlink group (1: the kernel's, 2:
// udevd's) from a socket of this process's.
func multicast(t *testing.T, group uint32, msg []byte) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: group}); err != nil {
		t.Fatalf("sending to uevent group %d: %v", group, err)
	}
}

// TestIntegrationUdevSource: with uevent_source = "udev" the daemon listens
// to udevd's group, and the properties of its events reach match.property.
// No udevd runs here: the test multicasts, as root, the message udevd would.
func TestIntegrationUdevSource(t *testing.T) {
	requireLoops(t)
	r := start(t, fmt.Sprintf(`
[daemon]
uevent_source = "udev"
reconcile_interval = "0"

[[rule]]
name = "tagged test loops"
[rule.match]
name = [%q]
property = { ID_IOSCHED_TEST = "yes" }
[rule.set]
scheduler = "mq-deadline"
nr_requests = 64
`, loopGlob))
	passes := r.passes.Load()
	created := loops(t, 22400, 3)
	tagged, plain, sentinel := created[0], created[1], created[2]
	// The kernel's own add events do not reach a udev-mode daemon. Had
	// they been read, they would have been read before the sentinel's udev
	// event, sent after them, and their passes started first: once the
	// sentinel is handled, its pass must be the only one.
	sendUdev(t, sentinel)
	waitFor(t, 5*time.Second, "the sentinel's event to be handled", func() bool {
		st, err := statefile.Read(r.runtimeDir)
		return err == nil && st.Disks[sentinel] != nil
	})
	if n := r.passes.Load() - passes; n != 1 {
		t.Fatalf("a udev-mode daemon acted on kernel events: %d passes for one udev event", n)
	}
	if left := notConverged(t, []string{tagged, plain}); len(left) != 2 {
		t.Fatalf("a udev-mode daemon acted on kernel events: %v still off policy of 2", left)
	}
	sendUdev(t, tagged, "ID_IOSCHED_TEST=yes")
	sendUdev(t, plain, "ID_IOSCHED_TEST=no")
	waitConverged(t, []string{tagged}, 5*time.Second)
	waitFor(t, 5*time.Second, "the daemon to see the second event", func() bool {
		st, err := statefile.Read(r.runtimeDir)
		return err == nil && st.Disks[plain] != nil
	})
	if left := notConverged(t, []string{plain}); len(left) != 1 {
		t.Errorf("%s matched a property it does not have", plain)
	}
}

// sendUdev multicasts an "add" of name to udevd's group in libudev's format
// (libudev-monitor.c udev_monitor_netlink_header), with extra properties.
func sendUdev(t *testing.T, name string, props ...string) {
	t.Helper()
	devpath := "/devices/virtual/block/" + name
	body := strings.Join(append([]string{"ACTION=add", "DEVPATH=" + devpath, "SUBSYSTEM=block", "DEVTYPE=disk", "DEVNAME=/dev/" + name, "SEQNUM=1"}, props...), "\x00") + "\x00"
	h := make([]byte, 40)
	copy(h, "libudev\x00")
	binary.BigEndian.PutUint32(h[8:], 0xfeedcafe)
	binary.NativeEndian.PutUint32(h[12:], 40)                // header size
	binary.NativeEndian.PutUint32(h[16:], 40)                // properties offset
	binary.NativeEndian.PutUint32(h[20:], uint32(len(body))) // properties length
	multicast(t, 2, append(h, body...))
}
