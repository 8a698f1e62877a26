package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// Faults a daemon must survive without losing an original value, hanging or
// misleading. Each test says what the daemon did before the change that made
// it pass.

const restorePolicy = "[daemon]\nrestore_on_exit = true\n"

// A "remove" uevent for a disk still there (anyone can ask the kernel for
// one) does not make the daemon forget the disk and its original values.
// Before, the disk was forgotten: status undercounted, and a stop with
// restore_on_exit left it on the policy's values, logging failed=0.
func TestRemoveUeventForADiskStillThere(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(restorePolicy), "loop20000")
	// A drift the pass for the remove repairs, so that its writes show
	// the pass ran and kept the disk.
	writeFile(t, filepath.Join(r.d.cfg.FS.Root(), "block/loop20000/queue/nr_requests"), "32\n")
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("remove", "loop20000", "disk")}
	waitFor(t, 5*time.Second, "the pass for the remove to repair the drift", func() bool { return len(r.writes.Of("loop20000", "nr_requests")) == 2 })
	if st := r.state(t); st.Disks["loop20000"] == nil {
		// The state is written after the pass: wait for it.
		waitFor(t, 5*time.Second, "the state to list loop20000", func() bool { return r.state(t).Disks["loop20000"] != nil })
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != "none" || n != "128" {
		t.Errorf("after a forged remove and a stop: scheduler %s nr_requests %s, want the originals none 128", s, n)
	}
	if d := applytest.Diff(r.restores.Writes(), restoredLoop("loop20000")); d != "" {
		t.Errorf("restore at stop: %s", d)
	}
}

// A remove read late, after the disk's name went to another disk, forgets
// the old disk (its originals) but keeps the new one.
func TestStaleRemoveUeventKeepsTheNewDisk(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(restorePolicy), "loop20000")
	removeFakeDisk(t, r.d.cfg.FS, "loop20000")
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20000", 0)
	writeFile(t, filepath.Join(r.d.cfg.FS.Root(), "block/loop20000/diskseq"), "200\n")
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("remove", "loop20000", "disk")} // the old disk's; the new one's add was lost
	r.waitAttr(t, "loop20000", "nr_requests", "64")
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.attr(t, "loop20000", "scheduler"); s != "none" {
		t.Errorf("the new disk was not restored: scheduler %s", s)
	}
}

// originalsFor writes an originals file for this boot holding disks.
func originalsJSON(t *testing.T, disks map[string]*originals.Record) string {
	t.Helper()
	b, err := json.Marshal(originals.File{BootID: originals.BootID(), Disks: disks})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An unreadable originals file, truncated or a directory, is moved aside,
// never written over; the previous generation is read instead. The disk it
// does not cover, found on the policy's values, has unknown originals:
// status, the log and the exit summary say so, and what is known is
// restored. Before, a truncated file was replaced by the values found at
// start (the policy's own, which a stop then "restored", failed=0), and a
// directory kept the daemon from starting.
func TestUnreadableOriginals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"truncated", func(t *testing.T, path string) { writeFile(t, path, `{"boot_id": "`) }},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := fakeTree(t, "loop20000", "loop20001")
			// loop20001 is already on the policy's values: the daemon
			// that wrote the lost record set them.
			writeFile(t, filepath.Join(fs.Root(), "block/loop20001/queue/scheduler"), "none [mq-deadline] kyber\n")
			writeFile(t, filepath.Join(fs.Root(), "block/loop20001/queue/nr_requests"), "64\n")
			stateDir := t.TempDir()
			path := filepath.Join(stateDir, "originals.json")
			writeFile(t, path+".prev", originalsJSON(t, map[string]*originals.Record{
				"loop20000": {DiskSeq: "100", Values: map[string]string{"scheduler": "none", "nr_requests": "128"}},
			}))
			// loop20000 is on the policy's values too, its originals in
			// the previous generation.
			writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/scheduler"), "none [mq-deadline] kyber\n")
			writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/nr_requests"), "64\n")
			tt.plant(t, path)
			r := start(t, testPolicy(restorePolicy), func(cfg *Config) {
				cfg.FS = fs
				cfg.StateDir = stateDir
				cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
				cfg.hooks.stateDebounce = 10 * time.Millisecond
			})
			aside, _ := filepath.Glob(path + ".unreadable-*")
			if len(aside) != 1 {
				t.Errorf("the unreadable record was not moved aside: %v", aside)
			}
			waitFor(t, 5*time.Second, "status to name the unknown originals", func() bool {
				return slices.Equal(r.state(t).OriginalsUnknown, []string{"loop20001"})
			})
			if err := r.stop(t); !errors.Is(err, ErrNotRestored) || !strings.Contains(err.Error(), "1 disk(s)") {
				t.Errorf("stop with a disk whose originals are unknown: %v, want ErrNotRestored for 1 disk (exit 1)", err)
			}
			if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != "none" || n != "128" {
				t.Errorf("loop20000 (known from the previous generation): scheduler %s nr_requests %s, want none 128", s, n)
			}
			if d := applytest.Diff(r.restores.Writes(), restoredLoop("loop20000")); d != "" {
				t.Errorf("restore at stop: %s", d)
			}
			// The error Run returns sends the admin to the log for the
			// disks not restored: the log must name them.
			if len(r.log.Lines("level=ERROR", "not restored", "device=loop20001")) != 1 {
				t.Errorf("the disk not restored was not logged:\n%s", r.log)
			}
			// The next daemon still knows the values are unknown.
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the record of the unknown originals is gone: %v", err)
			}
			var f originals.File
			if err := json.Unmarshal(b, &f); err != nil || f.Disks["loop20001"] == nil || len(f.Disks["loop20001"].Unknown) != 2 {
				t.Errorf("originals file after stop = %s (%v)", b, err)
			}
		})
	}
}

// A state directory the original values cannot be saved in shows in status
// (and the last error). Before, the failure was logged and status said
// "last error: none".
func TestPersistenceFailureInStatus(t *testing.T) {
	t.Parallel()
	blocker := filepath.Join(t.TempDir(), "file")
	writeFile(t, blocker, "a file where a directory should be\n")
	r, _ := fakeDaemonWith(t, testPolicy(restorePolicy), func(cfg *Config) {
		cfg.StateDir = filepath.Join(blocker, "state") // ENOTDIR, even for root
	}, "loop20000")
	waitFor(t, 5*time.Second, "status to show the failure", func() bool {
		st := r.state(t)
		return st.PersistenceError != nil && st.LastError != nil && strings.Contains(st.PersistenceError.Message, "original values")
	})
}

// Reading the policy never blocks the loop: while a reload's load hangs,
// uevents are handled, the state file is kept, and a SIGTERM stops the
// daemon; a load that outlasts LoadTimeout is refused. Before, the load ran
// on the loop: a FIFO in the policy's place stopped everything, SIGTERM
// included, until someone wrote to it.
func TestSlowPolicyLoadDoesNotBlockTheLoop(t *testing.T) {
	t.Parallel()
	var slow atomic.Bool
	release := make(chan struct{})
	defer close(release)
	r, c := fakeDaemonWith(t, testPolicy(""), func(cfg *Config) {
		cfg.Load = func(path string) (*policy.Policy, error) {
			if slow.Load() {
				<-release
			}
			return policy.Load(path)
		}
		cfg.LoadTimeout = 2 * time.Second
	}, "loop20000")
	slow.Store(true)
	r.signals <- syscall.SIGHUP
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "nr_requests", "64")
	waitFor(t, 5*time.Second, "the state file to list the new disk", func() bool { return r.state(t).Disks["loop20001"] != nil })
	waitFor(t, 5*time.Second, "the slow load to be refused", func() bool {
		st := r.state(t)
		return st.LastReload != nil && !st.LastReload.OK && strings.Contains(strings.Join(st.LastReload.Errors, ""), "did not finish within 2s")
	})
	stopped := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(stopped); took > 3*time.Second {
		t.Errorf("stop took %s with a load hanging", took)
	}
}

// A SIGTERM during the start scan stops the daemon within 2 s, exit 0,
// without READY=1. Before, the scan ran to its end (30 s with a slow policy
// over 300 disks), READY=1 followed the SIGTERM, and the stop waited for
// passes.
func TestStopDuringTheStartScan(t *testing.T) {
	n := listenNotify(t)
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("loop2%04d", i)
	}
	fs := fakeTree(t, names...)
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	writeFile(t, policyPath, testPolicy(""))
	entered := make(chan struct{}, 300)
	d, err := New(Config{PolicyPath: policyPath, FS: fs, StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
		LockFile: filepath.Join(dir, "disks.lock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Signals: make(chan os.Signal), Parallel: 8,
		hooks: hooks{dial: newFakeDialer(ueventtest.NewConn()).dial,
			evaluate: func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
				entered <- struct{}{}
				time.Sleep(100 * time.Millisecond) // 300 disks, 8 at once: a 4 s scan
				return p.EvaluateUntil(dev, stop)
			}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-entered // the scan is under way
	cancel()  // what SIGTERM does
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s")
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("stopped %s after the SIGTERM, want under 2 s", took)
	}
	for _, m := range n.sent() { // Run has returned: everything it sent
		if strings.Contains(m, "READY=1") {
			t.Errorf("READY after a stop was asked: %q", m)
		}
	}
}

// A stop reaches an evaluation in flight: the daemon hands the policy's
// evaluation a stop that says yes once a stop begins, so a policy of
// thousands of rules is cut short between two rules (policy.EvaluateUntil)
// instead of being finished on every disk in flight, and what was cut
// short is never written.
func TestStopReachesAnEvaluation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	writeFile(t, policyPath, testPolicy(""))
	entered := make(chan struct{}, 8)
	stopSeen := make(chan struct{}, 8)
	fs := fakeTree(t, "loop20000", "loop20001")
	d, err := New(Config{PolicyPath: policyPath, FS: fs, StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
		LockFile: filepath.Join(dir, "disks.lock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Signals: make(chan os.Signal), Parallel: 8,
		hooks: hooks{dial: newFakeDialer(ueventtest.NewConn()).dial,
			evaluate: func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
				entered <- struct{}{}
				// An evaluation that takes until it is told to stop.
				if !eventually.Within(10*time.Second, stop) {
					return p.EvaluateUntil(dev, stop)
				}
				stopSeen <- struct{}{}
				return policy.Evaluation{Settings: []policy.Setting{{Attribute: "scheduler", Values: []string{"bfq"}}}}, false
			}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	<-entered // the scan is evaluating a disk
	cancel()  // what SIGTERM does
	stopped := time.Now()
	select {
	case <-stopSeen:
	case <-time.After(5 * time.Second):
		t.Fatal("the evaluation in flight was not told of the stop within 5 s")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s")
	}
	if took := time.Since(stopped); took > time.Second {
		t.Errorf("stopped %s after the SIGTERM, want under 1 s", took)
	}
	if w := d.writes.Load(); w != 0 {
		t.Errorf("%d writes after the stop: an evaluation cut short was written", w)
	}
}

// A second daemon on the same runtime directory exits at once with an
// error naming the running one's pid. Before, both ran and flapped every
// disk between their policies.
func TestSecondDaemonOnOneRuntimeDir(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy(""), "loop20000")
	second, err := New(Config{PolicyPath: r.policy, FS: r.d.cfg.FS, RuntimeDir: r.runtimeDir, StateDir: t.TempDir(),
		LockFile: r.lockFile, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Signals: make(chan os.Signal),
		hooks: hooks{dial: newFakeDialer(ueventtest.NewConn()).dial}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = second.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second daemon: Run = %v, want an error naming pid %d", err, os.Getpid())
	}
	if ctx.Err() != nil {
		t.Error("the second daemon ran until its context ended")
	}
	if st := r.state(t); st.PID != os.Getpid() {
		t.Errorf("the first daemon's state file is gone or changed: %+v", st)
	}
}

// In udev mode with no udevd (its control socket absent), the log and
// status say that hot-plugged disks go unnoticed, and the start scan still
// works. Before, nothing said why hot-plugged disks were never handled.
func TestUdevModeWithoutUdevd(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemonWith(t, testPolicy("[daemon]\nuevent_source = \"udev\"\n"), func(cfg *Config) {
		cfg.UdevControl = filepath.Join(t.TempDir(), "control")
		cfg.UdevDataDir = t.TempDir()
	}, "loop20000")
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Errorf("start scan: scheduler %s", got)
	}
	// A WARN an admin must see in the journal: hot-plugged disks go
	// unnoticed until a reconcile, and nothing else says why.
	if len(r.log.Lines("level=WARN", "no udevd runs")) != 1 {
		t.Errorf("no warning in the log:\n%s", r.log)
	}
	if w := r.state(t).Warnings; len(w) != 1 || !strings.Contains(w[0], "no udevd runs") {
		t.Errorf("status warnings = %q", w)
	}
	if s := r.d.statusLine(); !strings.Contains(s, "no udevd") {
		t.Errorf("STATUS= %q does not warn", s)
	}
}

// A udevd that is gone may leave its control socket behind: a socket file
// nothing listens on is no udevd, and the daemon says so as when the file
// is missing. Before, the file's presence was taken for a running udevd.
func TestUdevModeWithStaleUdevdSocket(t *testing.T) {
	t.Parallel()
	control := filepath.Join(t.TempDir(), "control")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: control, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	r, _ := fakeDaemonWith(t, testPolicy("[daemon]\nuevent_source = \"udev\"\n"), func(cfg *Config) {
		cfg.UdevControl = control
		cfg.UdevDataDir = t.TempDir()
	}, "loop20000")
	if w := r.state(t).Warnings; len(w) != 1 || !strings.Contains(w[0], "no udevd runs") || !strings.Contains(w[0], "connection refused") {
		t.Errorf("status warnings = %q, want one naming the refused connection", w)
	}
}

// A reload answers the requests made before it read the policy, each by
// name, in the state file.
func TestReloadAnswersItsRequests(t *testing.T) {
	t.Parallel()
	r, _ := fakeDaemon(t, testPolicy(""), "loop20000")
	dir := statefile.ReloadRequestDir(r.runtimeDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a"), "")
	writeFile(t, filepath.Join(dir, "b"), "")
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the reload to answer both", func() bool {
		st := r.state(t)
		return len(st.Reloads) == 1 && st.Reloads[0].Done && slices.Equal(st.Reloads[0].Requests, []string{"a", "b"})
	})
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("requests left after the reload: %v", entries)
	}
}

// A daemon killed after writing its policy leaves its originals file; an
// admin then sets the disk otherwise. The next daemon replays the record
// only while the disk still shows what the killed one wrote: here kyber
// and nr_requests 77 are the admin's, so the record is dropped (logged),
// they become the originals, and the stop puts them back, not the killed
// daemon's none and 128. A disk that still shows what was written keeps
// its record. (Before, the stop "restored" none and 128 over the admin.)
func TestStaleOriginalsDropped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name             string
		scheduler, nr    string // what the disk shows when the daemon starts
		wantSched, wantN string // after the stop
		dropped          bool
	}{
		{"set otherwise since", "none mq-deadline [kyber]\n", "77\n", "kyber", "77", true},
		{"as the daemon left it", "none [mq-deadline] kyber\n", "64\n", "none", "128", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := fakeTree(t, "loop20000")
			writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/scheduler"), tt.scheduler)
			writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/nr_requests"), tt.nr)
			stateDir := t.TempDir()
			writeFile(t, filepath.Join(stateDir, "originals.json"), originalsJSON(t, map[string]*originals.Record{
				"loop20000": {DiskSeq: "100", Values: map[string]string{"scheduler": "none", "nr_requests": "128"},
					Left: []map[string]string{{"scheduler": "mq-deadline", "nr_requests": "64"}}},
			}))
			r := start(t, testPolicy(restorePolicy), func(cfg *Config) {
				cfg.FS = fs
				cfg.StateDir = stateDir
				cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
			})
			r.waitAttr(t, "loop20000", "nr_requests", "64")
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != tt.wantSched || n != tt.wantN {
				t.Errorf("after the stop: scheduler %s nr_requests %s, want %s %s", s, n, tt.wantSched, tt.wantN)
			}
			// The restore puts back the record's values, or, the record
			// dropped, those found at start.
			want := []applytest.Write{applytest.W("loop20000", "scheduler", tt.wantSched), applytest.W("loop20000", "nr_requests", tt.wantN)}
			if d := applytest.Diff(r.restores.Writes(), want); d != "" {
				t.Errorf("restore at stop, record dropped=%v: %s", tt.dropped, d)
			}
		})
	}
}

// A probe record left by a process that ended before its restore (SIGTERM
// during a probe of a disk that stopped answering) is replayed at the
// daemon's start only while the disk shows what the probe left; an admin's
// values since are not undone, and the log says why the record was dropped.
func TestStaleProbeRecordAtStart(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/scheduler"), "none [mq-deadline] kyber\n")
	writeFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/nr_requests"), "77\n")
	stateDir := t.TempDir()
	rec := originals.File{BootID: originals.BootID(), PID: 1, Disks: map[string]*originals.Record{
		"loop20000": {DiskSeq: "100", Values: map[string]string{"scheduler": "none", "nr_requests": "128"},
			Left: []map[string]string{{"scheduler": "kyber", "nr_requests": "32"}}},
	}}
	if err := rec.Write(filepath.Join(stateDir, "probe-loop20000.originals.json"), false); err != nil {
		t.Fatal(err)
	}
	r := start(t, "", func(cfg *Config) {
		cfg.FS = fs
		cfg.StateDir = stateDir
		cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
	})
	if s, n := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); s != "mq-deadline" || n != "77" {
		t.Errorf("scheduler %s nr_requests %s, want the admin's mq-deadline 77", s, n)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "probe-loop20000.originals.json")); !os.IsNotExist(err) {
		t.Errorf("stale record kept: %v", err)
	}
}

// A probe record found unreadable at the daemon's start is moved aside,
// not deleted: the log warns, and the state (what `status` shows) lists
// it for as long as it is there. (Before, it was deleted, and nothing said
// that settings may have been left unrestored.)
func TestUnreadableProbeRecordAtStart(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	stateDir := t.TempDir()
	writeFile(t, filepath.Join(stateDir, "probe-loop20000.originals.json"), `{"boot_id": `)
	r := start(t, "", func(cfg *Config) {
		cfg.FS = fs
		cfg.StateDir = stateDir
		cfg.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
		cfg.hooks.stateDebounce = 10 * time.Millisecond
	})
	aside, _ := filepath.Glob(filepath.Join(stateDir, "probe-loop20000.originals.json.unreadable-*"))
	if len(aside) != 1 {
		t.Fatalf("the unreadable record was not moved aside: %v", aside)
	}
	waitFor(t, 5*time.Second, "the state to list the record moved aside", func() bool {
		return slices.Equal(r.state(t).OriginalsAside, aside)
	})
}
