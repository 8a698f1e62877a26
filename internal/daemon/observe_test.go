package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// A disk a rule's observe key matches has its stat sampled and its busy
// time by depth in the metrics file; a disk no rule observes has no such
// series, and a disk that goes away leaves the file.
func TestDaemonObservesBusyDepth(t *testing.T) {
	t.Parallel()
	metricsFile := filepath.Join(t.TempDir(), "iosched.prom")
	pol := testPolicy("") + `
[[rule]]
name = "observed"
match.name = "loop20000"
observe = "100ms"

[daemon]
metrics_file = "` + metricsFile + `"
`
	r, c := fakeDaemon(t, pol, "loop20000", "loop20001")
	statOf := func(name string) string {
		return filepath.Join(r.d.cfg.FS.Root(), "devices", "virtual", "block", name, "stat")
	}
	// Both disks have counters. loop20000's grow as a disk's would, at
	// most half busy whatever the pace (10 ms busy per 20 ms or more),
	// with 4 requests in flight while busy (40 ms in queue per 10 ms).
	writeFile(t, statOf("loop20001"), "5 0 0 0 0 0 0 0 0 0 0\n")
	writeFile(t, statOf("loop20000"), "0 0 0 0 0 0 0 0 0 0 0\n")
	read := func() string {
		b, _ := os.ReadFile(metricsFile)
		return string(b)
	}
	// Every series of the disk's carries its key, its info's.
	series := func(name, labels, value string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + name + `\{disk="loop20000",key="loop/[^"]+"` + labels + `\} ` + value + `$`)
	}
	waitFor(t, 30*time.Second, "loop20000's series", func() bool {
		return series("iosched_disk_busy_depth_seconds_count", "", `\S+`).MatchString(read())
	})
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// A reader may find the file emptied: a sample it refuses,
			// which the observer starts again after. Numbers of a fixed
			// width keep a partial read from passing for a smaller
			// counter.
			os.WriteFile(statOf("loop20000"), []byte(fmt.Sprintf("%012d 0 0 0 0 0 0 0 0 %012d %012d\n", 3*i, 10*i, 40*i)), 0o644)
		}
	}()
	waitFor(t, 30*time.Second, "loop20000's busy time at depth 4", func() bool {
		s := read()
		return series("iosched_disk_busy_depth_seconds_bucket", `,le="2"`, "0").MatchString(s) &&
			series("iosched_disk_busy_depth_seconds_bucket", `,le="4"`, `[1-9]\S*|0\.\S+`).MatchString(s) &&
			series("iosched_disk_observed_ios_total", `,op="read"`, `[1-9]\S*`).MatchString(s)
	})
	close(stop)
	<-stopped
	if s := read(); !strings.Contains(s, `iosched_disk_info{disk="loop20000",key="loop/`) || !strings.Contains(s, `rotational="0"} 1`) {
		t.Errorf("no iosched_disk_info of loop20000 with its key:\n%s", s)
	}
	if s := read(); strings.Contains(s, `disk="loop20001"`) && strings.Contains(s, "iosched_disk_busy_depth") {
		t.Errorf("loop20001, which no rule observes, has busy series:\n%s", s)
	}

	removeFakeDisk(t, r.d.cfg.FS, "loop20000")
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("remove", "loop20000", "disk")}
	waitFor(t, 30*time.Second, "loop20000's series gone", func() bool {
		return !strings.Contains(read(), `disk="loop20000"`)
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// idleDaemon is a daemon over a fake tree of n idle disks, loop20000 on
// (their stat files regular files, unchanging), for the sampling
// benchmarks, and the disks' names.
func idleDaemon(b *testing.B, n int) (*Daemon, []string) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("loop%d", 20000+i)
	}
	fs := fakeTree(b, names...)
	for _, name := range names {
		writeFile(b, filepath.Join(fs.Root(), "block", name, "stat"),
			"    1000        0     8000      500        0        0        0        0        2     1000     2000\n")
	}
	d, err := New(Config{FS: fs, RuntimeDir: b.TempDir(), StateDir: b.TempDir(), LockFile: filepath.Join(b.TempDir(), "disks.lock")})
	if err != nil {
		b.Fatal(err)
	}
	return d, names
}

// BenchmarkObserveSampleRound: one observe sampler round over 1000 idle
// disks (a fake tree's stat files: the kernel's side of a read is
// contrib/bench/adaptcost.sh's to measure).
func BenchmarkObserveSampleRound(b *testing.B) {
	d, names := idleDaemon(b, 1000)
	const interval = 5 * time.Second
	for _, name := range names {
		n, err := sysfs.ParseName(name)
		if err != nil {
			b.Fatal(err)
		}
		d.record(n).observed = &observedDisk{interval: interval}
	}
	now := time.Now()
	d.sampleObservedDue(now) // opens the files, takes the baselines
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(interval)
		d.sampleObservedDue(now)
	}
	b.StopTimer()
	for _, rec := range d.records() {
		rec.mu.Lock()
		rec.observed.close()
		rec.mu.Unlock()
	}
}
