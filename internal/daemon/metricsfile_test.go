package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/ueventtest"
)

// A metrics file the daemon no longer writes is removed: after a reload
// moves metrics_file, after one unsets it, and when the daemon stops; a
// file left with its last counts would be exported by node_exporter as a
// live daemon's. A write that fails is logged once (not once per try), and
// its recovery once. (Before, the old files stayed with frozen values and
// a failure was only shown in status.)
func TestDaemonMetricsFileFollowsItsWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.prom"), filepath.Join(dir, "b.prom")
	missing := filepath.Join(dir, "not-yet", "c.prom")
	pol := func(path string) string {
		if path == "" {
			return testPolicy("")
		}
		return testPolicy("") + fmt.Sprintf("\n[daemon]\nmetrics_file = %q\n", path)
	}
	r, c := fakeDaemon(t, pol(first), "loop20000")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	reload := func(path string) {
		t.Helper()
		writeFile(t, r.policy, pol(path))
		r.signals <- syscall.SIGHUP
	}
	waitFor(t, 5*time.Second, "the first file", func() bool { return exists(first) })

	reload(second)
	waitFor(t, 5*time.Second, "the second file written and the first removed", func() bool { return exists(second) && !exists(first) })

	reload("")
	waitFor(t, 5*time.Second, "the second file removed once metrics_file is unset", func() bool { return !exists(second) })

	// A directory that is missing: each uevent is a new try, the failure
	// is logged once.
	reload(missing)
	for i := range 3 {
		addFakeDisk(t, r.d.cfg.FS.Root(), fmt.Sprintf("loop2001%d", i), 1)
		c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", fmt.Sprintf("loop2001%d", i), "disk")}
		r.waitAttr(t, fmt.Sprintf("loop2001%d", i), "nr_requests", "64")
	}
	// The log is asserted: the failure is logged once, not at each try
	// (which would flood the journal), and that is the behaviour here.
	waitFor(t, 5*time.Second, "the write failure logged", func() bool { return len(r.log.Lines("the metrics file cannot be written", "not-yet")) > 0 })
	// More tries (one a second): still one line.
	waitFor(t, 10*time.Second, "three failed tries", func() bool { return r.d.metrics.Failures() >= 3 })
	if got := r.log.Lines("the metrics file cannot be written", "not-yet"); len(got) != 1 {
		t.Errorf("the write failure logged %d times, want once:\n%s", len(got), r.log)
	}
	if err := os.Mkdir(filepath.Dir(missing), 0o755); err != nil {
		t.Fatal(err)
	}
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
	waitFor(t, 5*time.Second, "the file written once its directory is there", func() bool { return exists(missing) })

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if exists(missing) {
		t.Errorf("%s is still there after the daemon stopped: its counts are frozen", missing)
	}
}
