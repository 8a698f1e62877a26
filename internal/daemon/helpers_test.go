package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// This package's loop numbers (see internal/looptest): 20000-23999. Every test
// policy matches only loop2[0-3]NNN, so a daemon running against the real
// /sys never changes another device.
const (
	loopBase  = 20000
	loopGlob  = `loop2[0-3][0-9][0-9][0-9]`
	loopLimit = 24000
)

// testPolicy is a policy that sets mq-deadline and nr_requests on this
// package's loops only, followed by extra TOML.
func testPolicy(extra string) string {
	return fmt.Sprintf(`
[[rule]]
name = "daemon test loops"
[rule.match]
name = [%q]
[rule.set]
scheduler = "mq-deadline"
nr_requests = 64
%s`, loopGlob, extra)
}

// writeFile replaces path's content at once, by a rename, as a sysfs
// attribute changes: a daemon reading a fake tree's attribute while the
// test changes it must never see it empty or half written (a truncating
// write lets a pass read "" and plan nothing until the next event).
func writeFile(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// running is a daemon started in the test process.
type running struct {
	d          *Daemon
	log        *ueventtest.LogBuffer
	signals    chan os.Signal
	cancel     context.CancelFunc
	done       chan error
	policy     string
	runtimeDir string
	stateDir   string
	lockFile   string
	// writes records what the passes write to disks (hooks.passTarget),
	// restores what the restore at stop writes (hooks.restoreTarget):
	// what would reach the kernel, which tests assert on rather than on
	// the log.
	writes   applytest.Recorder
	restores applytest.Recorder
	// passes and adaptGaps count the passes ended and the adaptive
	// samples not taken (hooks.passDone, hooks.adaptGap).
	passes    atomic.Int64
	adaptGaps atomic.Int64
	passMu    sync.Mutex
	passesOf  map[string]int64       // passes ended, by disk
	probesRun map[string][]time.Time // when each probe started measuring, by disk
}

// start runs a daemon with policyText until the test ends, and returns
// once it is ready (the first scan done).
func start(t testing.TB, policyText string, modify ...func(*Config)) *running {
	t.Helper()
	dir := t.TempDir()
	r := &running{
		log:        &ueventtest.LogBuffer{},
		signals:    make(chan os.Signal, 4),
		done:       make(chan error, 1),
		policy:     filepath.Join(dir, "policy.toml"),
		runtimeDir: filepath.Join(dir, "run"),
		stateDir:   filepath.Join(dir, "state"),
		lockFile:   filepath.Join(dir, "lock", "disks.lock"),
	}
	writeFile(t, r.policy, policyText)
	cfg := Config{
		PolicyPath: r.policy,
		RuntimeDir: r.runtimeDir,
		StateDir:   r.stateDir,
		LockFile:   r.lockFile,
		Logger:     slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Signals:    r.signals,
		// The tests that reload send SIGHUP after each edit; the ones
		// about following the files turn it on.
		NoPolicyFollow: true,
	}
	cfg.hooks.passTarget = r.writes.Wrap
	cfg.hooks.restoreTarget = r.restores.Wrap
	cfg.hooks.passDone = func(name string) {
		r.passMu.Lock()
		if r.passesOf == nil {
			r.passesOf = map[string]int64{}
		}
		r.passesOf[name]++
		r.passMu.Unlock()
		r.passes.Add(1)
	}
	cfg.hooks.adaptGap = func(string) { r.adaptGaps.Add(1) }
	cfg.hooks.probeStep = func(name, step string) {
		if step == "measuring" {
			r.passMu.Lock()
			if r.probesRun == nil {
				r.probesRun = map[string][]time.Time{}
			}
			r.probesRun[name] = append(r.probesRun[name], time.Now())
			r.passMu.Unlock()
		}
	}
	for _, m := range modify {
		m(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("daemon log (debug lines left out):\n%s", tail(r.log.Without("level=DEBUG"), 60))
		}
	})
	select {
	case <-d.Ready():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("daemon stopped before it was ready: %v\n%s", err, r.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon was not ready within 30 s\n%s", r.log.String())
	}
	return r
}

// stop stops the daemon (once) and returns Run's error.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop within 30 s")
		return nil
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor is eventually.True, by the name this package's tests know it.
var waitFor = eventually.True

// loops creates loop devices first..first+n-1 of this package's range and
// removes them, in parallel, when the test ends.
func loops(t testing.TB, first, n int) []string {
	t.Helper()
	if first < loopBase || first+n > loopLimit {
		t.Fatalf("loops %d..%d are outside this package's range", first, first+n-1)
	}
	names := make([]string, n)
	t.Cleanup(func() { removeLoops(t, first, n) })
	for i := range n {
		if err := looptest.AddRaw(first + i); err != nil {
			t.Fatalf("LOOP_CTL_ADD %d: %v", first+i, err)
		}
		names[i] = looptest.Name(first + i)
	}
	return names
}

func removeLoops(t testing.TB, first, n int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		if _, err := os.Stat("/sys/block/" + looptest.Name(first+i)); err != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(n int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := looptest.RemoveRaw(n); err != nil {
				t.Errorf("LOOP_CTL_REMOVE %d: %v", n, err)
			}
		}(first + i)
	}
	wg.Wait()
}

// converged reports which of names do not (yet) have mq-deadline and
// nr_requests 64.
func notConverged(t testing.TB, names []string) []string {
	t.Helper()
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		s, err1 := fs.ReadQueueAttr(n, "scheduler")
		r, err2 := fs.ReadQueueAttr(n, "nr_requests")
		if err1 != nil || err2 != nil || s != "mq-deadline" || r != "64" {
			out = append(out, n)
		}
	}
	return out
}

func waitConverged(t testing.TB, names []string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	left := names
	waitFor(t, timeout, "every loop device to converge", func() bool {
		left = notConverged(t, left)
		return len(left) == 0
	})
	return time.Since(start)
}

func requireLoops(t *testing.T) {
	t.Helper()
	looptest.Require(t)
}

// otherProcessLocks is the daemon's lock file as another process (a CLI
// probe, apply) sees it: its own open file, whose locks the daemon's
// exclude.
func (r *running) otherProcessLocks(t testing.TB) *disklock.Locks {
	l := disklock.New(r.lockFile)
	t.Cleanup(l.Close)
	return l
}

// reloadSeq is the number of the last reload the state file shows, 0
// before the first.
func (r *running) reloadSeq(t testing.TB) int {
	t.Helper()
	st, err := statefile.Read(r.runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastReload == nil {
		return 0
	}
	return st.LastReload.Seq
}

// replan sends SIGHUP and waits until the state file shows that reload
// taken and every disk re-planned under it.
func (r *running) replan(t testing.TB, what string, within time.Duration) {
	t.Helper()
	seq := r.reloadSeq(t) + 1
	r.signals <- syscall.SIGHUP
	waitFor(t, within, what, func() bool {
		st, err := statefile.Read(r.runtimeDir)
		return err == nil && st.LastReload != nil && st.LastReload.Seq >= seq && st.LastReload.OK && st.LastReload.Done
	})
}

// waitScans waits until the state file has shown n scans for reason ended
// after the call. Each LastScan it shows is one scan's end; one it did not
// catch is not counted, so n seen means at least n ran.
func (r *running) waitScans(t testing.TB, n int, reason string, within time.Duration) *statefile.Scan {
	t.Helper()
	var last time.Time
	if st, err := statefile.Read(r.runtimeDir); err == nil && st.LastScan != nil {
		last = st.LastScan.At
	}
	seen := 0
	var scan *statefile.Scan
	waitFor(t, within, fmt.Sprintf("%d %s scans", n, reason), func() bool {
		st, err := statefile.Read(r.runtimeDir)
		if err != nil || st.LastScan == nil || !st.LastScan.At.After(last) {
			return false
		}
		last = st.LastScan.At
		if st.LastScan.Reason == reason {
			seen++
			scan = st.LastScan
		}
		return seen >= n
	})
	return scan
}

// noErrors fails t when the state file records an error, the daemon's or
// a disk's.
func (r *running) noErrors(t testing.TB) {
	t.Helper()
	st, err := statefile.Read(r.runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastError != nil {
		t.Errorf("last error: %+v", st.LastError)
	}
	for name, d := range st.Disks {
		if d.LastError != nil || len(d.Errors) > 0 {
			t.Errorf("%s: last error %+v, errors %q", name, d.LastError, d.Errors)
		}
	}
}

// restoredLoop is what the restore at stop writes to a fake loop disk the
// policy of testPolicy set: its original scheduler and nr_requests.
func restoredLoop(name string) []applytest.Write {
	return []applytest.Write{applytest.W(name, "scheduler", "none"), applytest.W(name, "nr_requests", "128")}
}

// waitNewDiskNotDrift waits until a disk that replaced name (after
// replaced) has the policy's settings, written once each, and the state
// file shows them as a new disk's first changes, not as drift repaired.
func (r *running) waitNewDiskNotDrift(t testing.TB, name string, replaced time.Time) {
	t.Helper()
	waitFor(t, 5*time.Second, "the new disk's changes in the state file", func() bool {
		st, err := statefile.Read(r.runtimeDir)
		if err != nil || st.LastChange == nil || st.LastChange.Device != name || st.LastChange.At.Before(replaced) {
			return false
		}
		return st.LastChange.Attribute == "nr_requests" && st.LastChange.To == "64"
	})
	if c := r.state(t).LastChange; c.Drift {
		t.Errorf("a new disk's first write shown as drift repaired: %+v", c)
	}
	want := []applytest.Write{applytest.W(name, "scheduler", "mq-deadline"), applytest.W(name, "nr_requests", "64")}
	if d := applytest.Diff(r.writes.Of(name, ""), append(want, want...)); d != "" {
		t.Errorf("the old disk's writes, then the new one's: %s", d)
	}
}

// waitPasses waits until the daemon has ended n passes in all.
func (r *running) waitPasses(t testing.TB, n int64) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d passes", n), func() bool { return r.passes.Load() >= n })
}

// passCount is how many passes over name have ended.
func (r *running) passCount(name string) int64 {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	return r.passesOf[name]
}

// waitPassesOf waits until n passes over name have ended in all.
func (r *running) waitPassesOf(t testing.TB, name string, n int64) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d passes over %s", n, name), func() bool { return r.passCount(name) >= n })
}

// probes is how many probes of name have started measuring (a test that
// sets hooks.probeStep counts its own).
func (r *running) probes(name string) int {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	return len(r.probesRun[name])
}

// probeStarts is when each probe of name started measuring.
func (r *running) probeStarts(name string) []time.Time {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	return slices.Clone(r.probesRun[name])
}
