package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/restore"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/ueventtest"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

// fakeDaemon runs a daemon on a fake sysfs tree with a fake uevent socket.
func fakeDaemon(t *testing.T, policyText string, disks ...string) (*running, *ueventtest.Conn) {
	t.Helper()
	return fakeDaemonWith(t, policyText, func(*Config) {}, disks...)
}

func (r *running) attr(t *testing.T, name, attr string) string {
	t.Helper()
	return readFake(t, r.d.cfg.FS, name, attr)
}

func (r *running) waitAttr(t *testing.T, name, attr, want string) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%s %s = %s", name, attr, want), func() bool {
		v, err := r.d.cfg.FS.ReadQueueAttr(name, attr)
		return err == nil && v == want
	})
}

func (r *running) state(t testing.TB) *statefile.State {
	t.Helper()
	st, err := statefile.Read(r.runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestDaemonAppliesAtStartAndOnEvents(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(""), "loop20000", "loop7")
	// Ready means the first scan is done.
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Fatalf("after start loop20000 scheduler = %s, want mq-deadline", got)
	}
	if got := r.attr(t, "loop7", "scheduler"); got != "none" {
		t.Fatalf("loop7 (no rule matches it) scheduler = %s, want none untouched", got)
	}
	if w := r.writes.Of("loop20000", ""); len(w) != 2 {
		t.Errorf("%d writes for 2 changes: %+v", len(w), w)
	}
	if w := r.writes.Of("loop7", ""); len(w) != 0 {
		t.Errorf("writes to a disk that needed nothing: %+v", w)
	}

	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "nr_requests", "64")
	if got := r.attr(t, "loop20001", "scheduler"); got != "mq-deadline" {
		t.Errorf("hot-plugged loop20001 scheduler = %s", got)
	}
	if d := applytest.Diff(r.writes.Of("loop20001", "scheduler"), []applytest.Write{applytest.W("loop20001", "scheduler", "mq-deadline")}); d != "" {
		t.Errorf("loop20001's scheduler: %s", d)
	}

	waitFor(t, 5*time.Second, "the state file to list loop20001", func() bool {
		st := r.state(t)
		return st.Disks["loop20001"] != nil && len(st.Disks["loop20001"].Settings) == 2
	})
	st := r.state(t)
	if st.PID != os.Getpid() || st.Managed != 2 || st.Policy.Sources[0] != r.policy {
		t.Errorf("state pid %d managed %d sources %v", st.PID, st.Managed, st.Policy.Sources)
	}
	d := st.Disks["loop20001"]
	if d.Class != "loop" || d.Rules[0] != "daemon test loops" || d.Settings[0] != (statefile.Applied{Attribute: "scheduler", Value: "mq-deadline", Rule: "daemon test loops"}) {
		t.Errorf("state of loop20001 = %+v", d)
	}
	if st.LastChange == nil || !strings.HasPrefix(st.LastChange.Device, "loop2000") {
		t.Errorf("last change = %+v", st.LastChange)
	}

	// A partition's event is ignored; a removal forgets the disk.
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001p1", "partition")}
	removeFakeDisk(t, r.d.cfg.FS, "loop20001")
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("remove", "loop20001", "disk")}
	waitFor(t, 5*time.Second, "loop20001 to be forgotten", func() bool { return r.state(t).Disks["loop20001"] == nil })
	r.noErrors(t)
	if w := r.writes.Of("loop20001p1", ""); len(w) != 0 {
		t.Errorf("a partition written: %v", w)
	}
}

func TestDaemonRescansAfterLostEvents(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(""), "loop20000")
	// A disk appears, and its event is lost with others.
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20005", 5)
	c.Msgs <- ueventtest.Msg{Err: syscall.ENOBUFS}
	r.waitAttr(t, "loop20005", "scheduler", "mq-deadline")
	waitFor(t, 5*time.Second, "the state to show the rescan", func() bool {
		st := r.state(t)
		return st.LastScan != nil && st.LastScan.Reason == "lost uevents"
	})
}

func TestDaemonRepairsDrift(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy("[daemon]\nreconcile_interval = \"100ms\"\n"), "loop20000")
	writeFile(t, filepath.Join(r.d.cfg.FS.Root(), "block/loop20000/queue/nr_requests"), "32\n")
	r.waitAttr(t, "loop20000", "nr_requests", "64")
	waitFor(t, 5*time.Second, "the state to show the drift repaired", func() bool {
		c := r.state(t).LastChange
		return c != nil && c.Drift && c.Device == "loop20000" && c.Attribute == "nr_requests" && c.From == "32" && c.To == "64"
	})
	if d := applytest.Diff(r.writes.Of("loop20000", "nr_requests"), []applytest.Write{
		applytest.W("loop20000", "nr_requests", "64"), applytest.W("loop20000", "nr_requests", "64"),
	}); d != "" {
		t.Errorf("nr_requests set at start, then the drift repaired once: %s", d)
	}
	// Nothing drifted since: three reconciles read and do not write.
	mark := r.writes.Len()
	if scan := r.waitScans(t, 3, "reconcile", 5*time.Second); scan.Writes != 0 {
		t.Errorf("the last reconcile made %d writes with nothing drifted", scan.Writes)
	}
	if w := r.writes.Since(mark); len(w) != 0 {
		t.Errorf("%d writes while nothing drifted: %v", len(w), w)
	}
}

func TestDaemonReload(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(""), "loop20000")
	writeFile(t, r.policy, testPolicy("")+"\n[[rule]]\nname = \"broken\"\n[rule.set]\nreadahead_kb = 1\n")
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the state to show the failed reload", func() bool {
		st := r.state(t)
		return st.LastReload != nil && !st.LastReload.OK
	})
	// The old policy stays in force, for a new disk too.
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "nr_requests", "64")
	waitFor(t, 5*time.Second, "the state to tell the failed reload", func() bool {
		st := r.state(t)
		return st.LastReload != nil && !st.LastReload.OK && len(st.LastReload.Errors) == 1 && strings.Contains(st.LastReload.Errors[0], "readahead_kb")
	})
	if st := r.state(t); st.LastReload.Seq != 1 || !st.LastReload.Done {
		t.Errorf("a refused reload: seq %d done %v, want 1 and done", st.LastReload.Seq, st.LastReload.Done)
	}

	writeFile(t, r.policy, strings.Replace(testPolicy(""), "nr_requests = 64", "nr_requests = 32", 1))
	r.signals <- syscall.SIGHUP
	r.waitAttr(t, "loop20000", "nr_requests", "32")
	r.waitAttr(t, "loop20001", "nr_requests", "32")
	waitFor(t, 5*time.Second, "the state to tell the good reload", func() bool {
		st := r.state(t)
		return st.LastReload != nil && st.LastReload.OK && st.LastReload.Done
	})
	if st := r.state(t); st.LastReload.Seq != 2 {
		t.Errorf("second reload: seq %d, want 2", st.LastReload.Seq)
	}
	// The failed reload is history: no longer the last error.
	if st := r.state(t); st.LastError != nil {
		t.Errorf("last error after a good reload: %+v", st.LastError)
	}
	if s := r.d.statusLine(); strings.Contains(s, "error") || strings.Contains(s, "FAILED") {
		t.Errorf("STATUS= after a good reload: %q", s)
	}
	if w := append(r.writes.Of("loop20000", "scheduler"), r.writes.Of("loop20001", "scheduler")...); len(w) != 2 {
		t.Errorf("the reload rewrote a setting already in place: scheduler writes %v, want one a disk", w)
	}
}

// notifySocket is a socket in NOTIFY_SOCKET, as systemd's.
type notifySocket struct {
	t    *testing.T
	path string
	msgs chan string
}

// listenNotify makes the process's NOTIFY_SOCKET one the test reads.
func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	n := newNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", n.path)
	return n
}

// newNotifySocket is a socket as systemd's NOTIFY_SOCKET, for a child
// process's environment.
func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := &notifySocket{t: t, path: sock, msgs: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := ln.Read(buf)
			if err != nil {
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	return n
}

// expect returns the first message containing s, skipping others, within
// 5 s.
func (n *notifySocket) expect(s string) string {
	n.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-n.msgs:
			if strings.Contains(m, s) {
				return m
			}
		case <-deadline:
			n.t.Fatalf("no %s message within 5 s", s)
		}
	}
}

// sent returns every message sent so far, in order: it sends a marker of
// its own and collects what comes before it (a datagram socket keeps the
// order).
func (n *notifySocket) sent() []string {
	n.t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		n.t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("TEST-MARKER")); err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for {
		select {
		case m := <-n.msgs:
			if m == "TEST-MARKER" {
				return out
			}
			out = append(out, m)
		case <-time.After(5 * time.Second):
			n.t.Fatal("the marker did not come back within 5 s")
		}
	}
}

// none fails if a message containing s arrives within a while.
func (n *notifySocket) none(s, when string) {
	n.t.Helper()
	deadline := time.After(100 * time.Millisecond)
	for {
		select {
		case m := <-n.msgs:
			if strings.Contains(m, s) {
				n.t.Fatalf("%s: got %q", when, m)
			}
		case <-deadline:
			return
		}
	}
}

func TestSdNotify(t *testing.T) {
	n := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000")

	r, _ := fakeDaemon(t, testPolicy(""), "loop20000")
	m := n.expect("READY=1")
	if !strings.Contains(m, "STATUS=1 disks managed; last change") {
		t.Errorf("READY message %q has no STATUS= summary", m)
	}
	n.expect("WATCHDOG=1")
	n.expect("WATCHDOG=1") // and again: pinged while the loop runs

	r.signals <- syscall.SIGHUP
	m = n.expect("RELOADING=1")
	if !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING message %q has no MONOTONIC_USEC= (systemd >= 253 wants it)", m)
	}
	n.expect("READY=1")
	// An invalid policy: READY=1 at once, the old one staying in force.
	writeFile(t, r.policy, "[[rule]]\nname = \"broken\"\n[rule.set]\nreadahead_kb = 1\n")
	r.signals <- syscall.SIGHUP
	n.expect("RELOADING=1")
	n.expect("READY=1")

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	n.expect("STOPPING=1")
	if _, err := os.Stat(statefile.Path(r.runtimeDir)); !os.IsNotExist(err) {
		t.Errorf("state file left behind by a clean stop: %v", err)
	}
}

func TestRestoreOnExit(t *testing.T) {
	t.Parallel()
	policy := testPolicy("[daemon]\nrestore_on_exit = true\n")
	r, _ := fakeDaemon(t, policy, "loop20000")
	saved, err := os.ReadFile(filepath.Join(r.stateDir, "originals.json"))
	if err != nil {
		t.Fatalf("no originals file after the first change: %v", err)
	}
	var f originals.File
	if err := json.Unmarshal(saved, &f); err != nil {
		t.Fatal(err)
	}
	if got := f.Disks["loop20000"]; got == nil || got.Values["scheduler"] != "none" || got.Values["nr_requests"] != "128" || got.DiskSeq != "100" {
		t.Fatalf("originals = %s", saved)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != "none" || n != "128" {
		t.Fatalf("after stop: scheduler %s nr_requests %s, want the originals none 128", s, n)
	}
	if _, err := os.Stat(filepath.Join(r.stateDir, "originals.json")); !os.IsNotExist(err) {
		t.Errorf("originals file kept after everything was restored: %v", err)
	}

	// A crash: the settings stay as the daemon made them, the originals
	// file stays. The next daemon finds nothing to change, and restores
	// the first-seen values, not the ones it found.
	root := r.d.cfg.FS.Root()
	writeFile(t, filepath.Join(root, "block/loop20000/queue/scheduler"), "none [mq-deadline] kyber\n")
	writeFile(t, filepath.Join(root, "block/loop20000/queue/nr_requests"), "64\n")
	writeFile(t, filepath.Join(r.stateDir, "originals.json"), string(saved))
	r2 := start(t, policy, func(cfg *Config) {
		cfg.FS = r.d.cfg.FS
		cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
		cfg.StateDir = r.stateDir
	})
	if w := r2.writes.Of("loop20000", ""); len(w) != 0 {
		t.Errorf("the restarted daemon changed what was already in place: %+v", w)
	}
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != "none" || n != "128" {
		t.Fatalf("after crash and restart: scheduler %s nr_requests %s, want none 128", s, n)
	}
}

// In udev mode, disks no event has told about yet (the first scan) get their
// properties from udevd's database.
func TestDaemonUdevPropertiesFromTheDatabase(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000", "loop20001")
	db := t.TempDir()
	writeFile(t, filepath.Join(db, "b7:0"), "S:disk/by-id/x\nE:ID_IOSCHED_TEST=yes\nE:ID_BUS=ata\nG:systemd\n")
	writeFile(t, filepath.Join(db, "b7:1"), "E:ID_IOSCHED_TEST=no\n")
	r := start(t, fmt.Sprintf(`
[daemon]
uevent_source = "udev"
[[rule]]
name = "tagged"
[rule.match]
name = [%q]
property = { ID_IOSCHED_TEST = "yes" }
[rule.set]
scheduler = "mq-deadline"
`, loopGlob), func(cfg *Config) {
		cfg.FS = fs
		cfg.UdevDataDir = db
		cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
	})
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Errorf("loop20000, tagged in udev's database: scheduler %s", got)
	}
	if got := r.attr(t, "loop20001", "scheduler"); got != "none" {
		t.Errorf("loop20001, not tagged: scheduler %s", got)
	}
}

// A stop that gives up on a pass still writing a disk does not restore that
// disk (the two would write it at once); its originals stay remembered.
func TestRestoreOnExitSkipsDisksStillWriting(t *testing.T) {
	t.Parallel()
	var stuck atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	r, c := fakeDaemonWith(t, testPolicy("[daemon]\nrestore_on_exit = true\n"), func(cfg *Config) {
		cfg.hooks.evaluate = func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
			if dev.Name == "loop20000" && stuck.Load() {
				entered <- struct{}{}
				<-release
			}
			return p.EvaluateUntil(dev, stop)
		}
		cfg.StopTimeout = 100 * time.Millisecond
	}, "loop20000", "loop20001")
	stuck.Store(true)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
	<-entered
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.attr(t, "loop20001", "scheduler"); s != "none" {
		t.Errorf("loop20001, idle at stop: scheduler %s, want none restored", s)
	}
	if s := r.attr(t, "loop20000", "scheduler"); s != "mq-deadline" {
		t.Errorf("loop20000, its pass still running at stop: scheduler %s, want mq-deadline left alone", s)
	}
	if w := r.restores.Of("loop20000", ""); len(w) != 0 {
		t.Errorf("the restore wrote loop20000, its pass still running: %v", w)
	}
	if d := applytest.Diff(r.restores.Writes(), restoredLoop("loop20001")); d != "" {
		t.Errorf("restore at stop: %s", d)
	}
	r.wantRemembered(t, "loop20000")
}

// A stop does not restore a disk a probe holds (here a CLI probe's lock):
// the restore would switch the scheduler while the probe does. Its
// originals stay remembered for the next daemon.
func TestRestoreOnExitSkipsDisksAProbeHolds(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy("[daemon]\nrestore_on_exit = true\n"), "loop20000", "loop20001")
	if err := os.MkdirAll(r.stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	release, err := r.otherProcessLocks(t).Lock("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.attr(t, "loop20001", "scheduler"); s != "none" {
		t.Errorf("loop20001: scheduler %s, want none restored", s)
	}
	if s := r.attr(t, "loop20000", "scheduler"); s != "mq-deadline" {
		t.Errorf("loop20000, held by a probe at stop: scheduler %s, want mq-deadline left alone", s)
	}
	if d := applytest.Diff(r.restores.Writes(), restoredLoop("loop20001")); d != "" {
		t.Errorf("restore at stop, loop20000 held by a probe: %s", d)
	}
	r.wantRemembered(t, "loop20000")
	// The passes and the restore took each disk's lock around their
	// writes, and let it go.
	release()
	for _, name := range []string{"loop20000", "loop20001"} {
		if r.otherProcessLocks(t).Held(name) {
			t.Errorf("%s's lock is held after the stop", name)
		}
	}
}

// Two SIGHUPs close together: systemd hears READY=1 once the second one's
// policy is in force on every disk, not when the first one's re-plan ends.
// An invalid policy in between does not cut the valid one's re-plan short.
func TestReadyWaitsForEveryReload(t *testing.T) {
	for _, tt := range []struct {
		name, second, want string
	}{
		{"two valid", strings.Replace(testPolicy(""), "nr_requests = 64", "nr_requests = 16", 1), "16"},
		{"valid then invalid", testPolicy("") + "\n[[rule]]\nname = \"broken\"\n[rule.set]\nreadahead_kb = 1\n", "32"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := listenNotify(t)
			var hold atomic.Bool
			entered := make(chan struct{}, 1)
			step := make(chan struct{})
			r, _ := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) {
				cfg.hooks.evaluate = func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
					if hold.Load() {
						entered <- struct{}{}
						<-step
					}
					return p.EvaluateUntil(dev, stop)
				}
			}, "loop20000")
			defer func() {
				hold.Store(false)
				close(step) // a failed test leaves no pass blocked
			}()
			n.expect("READY=1")

			hold.Store(true)
			writeFile(t, r.policy, strings.Replace(testPolicy(""), "nr_requests = 64", "nr_requests = 32", 1))
			r.signals <- syscall.SIGHUP
			n.expect("RELOADING=1")
			<-entered // the first reload's re-plan is under way
			writeFile(t, r.policy, tt.second)
			r.signals <- syscall.SIGHUP
			n.expect("RELOADING=1")
			n.none("READY=1", "READY while the first reload was being re-planned")
			if tt.want == "16" {
				step <- struct{}{} // the first reload's re-plan ends
				<-entered          // the second one's is under way
				n.none("READY=1", "READY while the second reload was being re-planned")
			}
			hold.Store(false)
			step <- struct{}{}
			n.expect("READY=1")
			if got := r.attr(t, "loop20000", "nr_requests"); got != tt.want {
				t.Errorf("at READY nr_requests = %s, want %s", got, tt.want)
			}
		})
	}
}

// A disk removed and another added under its name is a new disk: its first
// writes are changes, not drift, whether the removal and the add merged
// into one pass or were lost (a rescan finds another major:minor).
func TestReplacedDiskIsNotDrift(t *testing.T) {
	t.Parallel()
	t.Run("events merged", func(t *testing.T) {
		var hold atomic.Bool
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		var owedMu sync.Mutex
		var owed []passKind // what loop20000 is owed after each ask
		r, c := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) {
			cfg.hooks.owed = func(name string, j job) {
				if name == "loop20000" {
					owedMu.Lock()
					owed = append(owed, j.kind)
					owedMu.Unlock()
				}
			}
			cfg.hooks.evaluate = func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
				if hold.CompareAndSwap(true, false) {
					entered <- struct{}{}
					<-release
				}
				return p.EvaluateUntil(dev, stop)
			}
		}, "loop20000")
		hold.Store(true)
		c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
		<-entered // loop20000's pass is running: what follows waits for it
		removeFakeDisk(t, r.d.cfg.FS, "loop20000")
		addFakeDisk(t, r.d.cfg.FS.Root(), "loop20000", 0)
		// Another disk: the same device number (as a loop device
		// re-added has), another diskseq.
		writeFile(t, filepath.Join(r.d.cfg.FS.Root(), "block/loop20000/diskseq"), "200\n")
		c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("remove", "loop20000", "disk")}
		c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20000", "disk")}
		waitFor(t, 5*time.Second, "the removal and the add to merge", func() bool {
			owedMu.Lock()
			defer owedMu.Unlock()
			n := len(owed)
			return n >= 2 && owed[n-2] == removal && owed[n-1] == full
		})
		replaced := time.Now()
		close(release)
		r.waitNewDiskNotDrift(t, "loop20000", replaced)
	})
	t.Run("events lost", func(t *testing.T) {
		r, c := fakeDaemon(t, testPolicy(""), "loop20000")
		removeFakeDisk(t, r.d.cfg.FS, "loop20000")
		addFakeDisk(t, r.d.cfg.FS.Root(), "loop20000", 5) // 7:5
		replaced := time.Now()
		c.Msgs <- ueventtest.Msg{Err: syscall.ENOBUFS}
		r.waitNewDiskNotDrift(t, "loop20000", replaced)
	})
}

// blockedWrites is a restore target whose writes to one disk wait until
// released: a queue frozen behind a disk that does not answer.
type blockedWrites struct {
	apply.QueueAttrs
	disk    string
	release chan struct{}
	blocked chan struct{} // closed when a write has started waiting
	once    sync.Once
}

func (b *blockedWrites) WriteQueueAttr(name, attr, value string) error {
	if name == b.disk {
		b.once.Do(func() { close(b.blocked) })
		<-b.release
	}
	return b.QueueAttrs.WriteQueueAttr(name, attr, value)
}

// The restore at stop does not wait for ever on a disk whose write does
// not return: the stop ends within StopTimeout and a second, the other
// disks restored, that disk logged as not restored, its originals kept for
// the next daemon and its lock held (no probe may switch the queue the
// write waits on). Before, the stop waited as long as the write did.
func TestRestoreAtStopDoesNotWaitForAFrozenQueue(t *testing.T) {
	t.Parallel()
	bw := &blockedWrites{disk: "loop20000", release: make(chan struct{}), blocked: make(chan struct{})}
	unblock := sync.OnceFunc(func() { close(bw.release) })
	t.Cleanup(unblock)
	var restores applytest.Recorder
	r, _ := fakeDaemonWith(t, testPolicy("[daemon]\nrestore_on_exit = true\n"), func(cfg *Config) {
		cfg.StopTimeout = 300 * time.Millisecond
		cfg.hooks.restoreTarget = func(t apply.QueueAttrs) apply.QueueAttrs { bw.QueueAttrs = restores.Wrap(t); return bw }
	}, "loop20000", "loop20001")
	start := time.Now()
	if err := r.stop(t); !errors.Is(err, ErrNotRestored) || !strings.Contains(err.Error(), "1 disk(s)") {
		t.Errorf("stop with a disk not restored: %v, want ErrNotRestored for 1 disk (the process exits 1)", err)
	}
	took := time.Since(start)
	select {
	case <-bw.blocked:
	default:
		t.Fatal("the restore never wrote loop20000")
	}
	if took > 300*time.Millisecond+restore.Grace+time.Second {
		t.Errorf("stop took %s with a restore write that does not return", took)
	}
	if s := r.attr(t, "loop20001", "scheduler"); s != "none" {
		t.Errorf("loop20001: scheduler %s, want none restored", s)
	}
	if d := applytest.Diff(restores.Writes(), restoredLoop("loop20001")); d != "" {
		t.Errorf("loop20001's restore: %s", d)
	}
	r.wantRemembered(t, "loop20000")
	runtime.GC() // a lock kept only by a file nobody references would go here
	if !r.otherProcessLocks(t).Held("loop20000") {
		t.Error("loop20000's lock was let go while its restore write waits")
	}
	if left := r.d.inFlight.All(); len(left) != 1 || left[0].Disk != "loop20000" || left[0].What != "restore" {
		t.Errorf("writes left in flight: %+v, want loop20000's restore", left)
	}
	// The write left in the kernel is one an admin must be told of: the
	// process is gone by the time it returns, and only the log says so.
	if len(r.log.Lines("level=WARN", "left at stop", "device=loop20000", "write=restore")) != 1 {
		t.Errorf("the stop's log does not name the write it left")
	}
	unblock() // the disk answers: the write returns, and the lock is let go
	waitFor(t, 5*time.Second, "loop20000's lock to be let go and its write no longer in flight", func() bool {
		return !r.otherProcessLocks(t).Held("loop20000") && len(r.d.inFlight.All()) == 0
	})
}

// A write left in flight shows in the state file, under its disk, until it
// returns.
func TestInFlightWriteInState(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy(""), "loop20000")
	returned := r.d.inFlight.Add("loop20000", "scheduler bfq")
	waitFor(t, 5*time.Second, "the write in flight in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && len(ds.InFlight) == 1 && ds.InFlight[0].What == "scheduler bfq" && len(ds.Settings) > 0
	})
	returned()
	waitFor(t, 5*time.Second, "the write to leave the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && len(ds.InFlight) == 0
	})
}

// wantRemembered checks that the originals file keeps the original values
// of the disks named, and of no other.
func (r *running) wantRemembered(t *testing.T, disks ...string) {
	t.Helper()
	saved, err := os.ReadFile(filepath.Join(r.stateDir, "originals.json"))
	if err != nil {
		t.Fatalf("originals file: %v", err)
	}
	var f originals.File
	if err := json.Unmarshal(saved, &f); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(maps.Keys(f.Disks)), slices.Sorted(slices.Values(disks))) {
		t.Errorf("originals file = %s, want the values of %v only", saved, disks)
	}
}

// A disk whose lock another process holds (a CLI probe, perhaps stuck on a
// disk that stopped answering) is not written, and status says why, once
// in the log; when the lock is let go, the next pass writes it and the
// note goes.
func TestStatusSaysWhyAHeldDiskIsNotWritten(t *testing.T) {
	t.Parallel()
	lockFile := filepath.Join(t.TempDir(), "disks.lock")
	release, err := disklock.New(lockFile).Lock("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	r, c := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) { cfg.LockFile = lockFile }, "loop20000", "loop20001")
	if got := r.attr(t, "loop20001", "scheduler"); got != "mq-deadline" {
		t.Fatalf("loop20001 (not held) scheduler = %s, want mq-deadline", got)
	}
	if got := r.attr(t, "loop20000", "scheduler"); got != "none" {
		t.Fatalf("loop20000 (held) scheduler = %s, want none: written under another's lock", got)
	}
	var held *statefile.Problem
	waitFor(t, 5*time.Second, "the state file to say loop20000 is held", func() bool {
		if d := r.state(t).Disks["loop20000"]; d != nil {
			held = d.Held
		}
		return held != nil
	})
	if !strings.Contains(held.Message, "loop20000") || !strings.Contains(held.Message, "lock") {
		t.Errorf("held = %q, want the disk and its lock named", held.Message)
	}
	// Another pass while still held (one disk's passes run one after the
	// other, so it ends before the pass after the release).
	passes := r.passes.Load()
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
	r.waitPasses(t, passes+1)

	release()
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	waitFor(t, 5*time.Second, "the held note to go", func() bool {
		d := r.state(t).Disks["loop20000"]
		return d != nil && d.Held == nil
	})
	// Warned once over two passes, not at each: the log's volume is the
	// behaviour here (the state's note is checked above).
	if n := len(r.log.Lines("level=WARN", "another process holds the disk's lock", "device=loop20000")); n != 1 {
		t.Errorf("%d log lines for one held disk over two passes, want 1:\n%s", n, r.log)
	}
}
