package daemon

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIntegrationRescanSpeed: a rescan of 1000 disks already in policy
// reads a few files a disk and writes nothing.
func TestIntegrationRescanSpeed(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy(`[daemon]
reconcile_interval = "0"`))
	names := loops(t, 21000, 1000)
	took := waitConverged(t, names, 60*time.Second)
	t.Logf("1000 hot-plugged loops converged %s after the last was created", took)
	r.d.scan(settingsOnly, "test") // waits for the passes still finishing
	best, fewest := time.Hour, math.Inf(1)
	for range 5 {
		before := readSyscalls(t)
		res := r.d.scan(settingsOnly, "test")
		perDisk := float64(readSyscalls(t)-before) / float64(res.disks)
		if res.writes != 0 {
			t.Errorf("rescan of disks in policy made %d writes", res.writes)
		}
		best, fewest = min(best, res.took), min(fewest, perDisk)
	}
	t.Logf("rescan of %d disks: best of 5 %s, fewest read calls a disk %.2f", 1000, best, fewest)
	// Its time is the benchmark's to judge (contrib/bench/run.sh, on a
	// quiet machine); here the work is counted, which no load changes. A
	// settings-only rescan reads back the two attributes the rule sets,
	// one read call each (the half is for reads of the process's other
	// goroutines); a rescan that reads the disk's facts again as a new
	// disk's pass does takes at least twice as many.
	if fewest > 2.5 {
		t.Errorf("rescan of 1000 disks in policy: %.2f read calls a disk, want the 2 attributes the rule sets", fewest)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use %d KiB, stacks %d KiB, sys %d KiB, goroutines %d", ms.HeapInuse>>10, ms.StackInuse>>10, ms.Sys>>10, runtime.NumGoroutine())
}

// readSyscalls is the test process's count of read system calls so far
// (syscr in /proc/self/io: read, pread, readv and the like, all threads).
func readSyscalls(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("/proc/self/io: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/io has no syscr line:\n%s", b)
	return 0
}
