package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/promtest"
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
	// A directory in the file's place, until the test removes it: each
	// try makes its temporary file beside it, which a watch counts, and
	// fails to rename it into place.
	taken := filepath.Join(dir, "taken", "c.prom")
	if err := os.MkdirAll(taken, 0o755); err != nil {
		t.Fatal(err)
	}
	tries := promtest.WatchFile(t, taken)
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

	// A file that cannot be written: each uevent is a new try, the
	// failure is logged once.
	reload(taken)
	for i := range 3 {
		addFakeDisk(t, r.d.cfg.FS.Root(), fmt.Sprintf("loop2001%d", i), 1)
		c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", fmt.Sprintf("loop2001%d", i), "disk")}
		r.waitAttr(t, fmt.Sprintf("loop2001%d", i), "nr_requests", "64")
	}
	// The log is asserted: the failure is logged once, not at each try
	// (which would flood the journal), and that is the behaviour here.
	waitFor(t, 5*time.Second, "the write failure logged", func() bool { return len(r.log.Lines("the metrics file cannot be written", "taken")) > 0 })
	// More tries (one a second): still one line.
	waitFor(t, 10*time.Second, "three failed tries", func() bool { return tries.Tries() >= 3 })
	if got := r.log.Lines("the metrics file cannot be written", "taken"); len(got) != 1 {
		t.Errorf("the write failure logged %d times, want once:\n%s", len(got), r.log)
	}
	if tries.Writes() != 0 {
		t.Fatalf("%d writes landed with a directory in the file's place", tries.Writes())
	}
	if err := os.Remove(taken); err != nil {
		t.Fatal(err)
	}
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20000", "disk")}
	waitFor(t, 5*time.Second, "the file written once its place is free", func() bool {
		st, err := os.Stat(taken)
		return err == nil && st.Mode().IsRegular()
	})

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if exists(taken) {
		t.Errorf("%s is still there after the daemon stopped: its counts are frozen", taken)
	}
}
