package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/promtest"
)

// parse reads a written file as node_exporter's textfile collector does.
func parse(t *testing.T, b []byte) map[string]*dto.MetricFamily { return promtest.Parse(t, b) }

// value finds the sample of family name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	return promtest.Value(fams, name, want)
}

// waitWrites waits until the file w watches has been written whole at
// least n times since the watch began.
func waitWrites(t *testing.T, r *Recorder, w *promtest.Watch, n int) {
	t.Helper()
	if !eventually.Within(5*time.Second, func() bool { return w.Writes() >= n }) {
		t.Fatalf("%d writes after 5 s, want %d (last error: %v)", w.Writes(), n, r.WriteError())
	}
}

// nothingToWrite fails t when the file was marked out of date, or a write
// of it begun, since the watch counted tries: the writer is woken only by
// a mark, so no write can come.
func nothingToWrite(t *testing.T, r *Recorder, w *promtest.Watch, tries int, when string) {
	t.Helper()
	if r.pending.Load() || w.Tries() != tries {
		t.Errorf("%s: the file was marked out of date", when)
	}
}

func start(t *testing.T, opts Options) (*Recorder, func()) {
	t.Helper()
	r := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	return r, func() { cancel(); <-done }
}

func TestFileCoversEveryMetric(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "iosched.prom")
	w := promtest.WatchFile(t, path)
	r, stop := start(t, Options{Path: path, Version: "v1.2.3", Interval: 10 * time.Millisecond})
	for range 3 {
		r.Uevent("add", "kernel")
	}
	r.Uevent("remove", "udev")
	r.Uevent("bind", "kernel")  // not a disk action iosched knows
	r.Uevent("add", "netlink?") // nor a source
	r.Rescan("start")
	r.Rescan("overflow")
	r.Rescan("reload")
	r.Rescan("reconcile")
	r.Rescan("reconcile")
	r.Rescan("whim")
	r.Overflow()
	r.Changed("scheduler", "virtio: none", false)
	r.Changed("scheduler", "virtio: none", true)
	r.Changed("nr_requests", "virtio: none", false)
	r.ApplyFailed("nr_requests")
	r.Reloaded(errors.New("policy.toml:3:1: unknown key"))
	r.Reloaded(nil)
	received := time.Now().Add(-30 * time.Millisecond)
	r.Applied(received)
	r.Applied(received)
	r.SetDisks(map[DiskKind]int{{"virtio", "none"}: 3, {"loop", "mq-deadline"}: 2, {"ram", ""}: 1, {"nvme", "none"}: 0})
	r.SetProbe("vda", []ProbeResult{
		{Scheduler: "none", IOPS: 143000, QD1IOPS: 9000, P99: 900 * time.Microsecond, QD1P99: 200 * time.Microsecond, Chosen: true},
		{Scheduler: "mq-deadline", IOPS: 120000, QD1IOPS: 8800, P99: time.Millisecond, QD1P99: 210 * time.Microsecond},
	})
	r.SetProbe("vdb", []ProbeResult{{Scheduler: "none", IOPS: 1}})
	r.ForgetProbe("vdb")
	r.AdaptSwitched("none", false)
	r.AdaptSwitched("none", false)
	r.AdaptSwitched("mq-deadline", true)
	r.SetAdaptDepth("vda", 23.5, 22)
	r.SetAdaptDepth("vdb", 1, 1)
	r.ForgetAdapt("vdb")
	waitWrites(t, r, w, w.Writes()+1)
	stop()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"iosched_uevents_total", map[string]string{"action": "add", "source": "kernel"}, 3},
		{"iosched_uevents_total", map[string]string{"action": "remove", "source": "udev"}, 1},
		{"iosched_uevents_total", map[string]string{"action": "other", "source": "kernel"}, 1},
		{"iosched_uevents_total", map[string]string{"action": "add", "source": "other"}, 1},
		{"iosched_uevents_total", map[string]string{"action": "change", "source": "kernel"}, 0},
		{"iosched_rescans_total", map[string]string{"reason": "start"}, 1},
		{"iosched_rescans_total", map[string]string{"reason": "overflow"}, 1},
		{"iosched_rescans_total", map[string]string{"reason": "reload"}, 1},
		{"iosched_rescans_total", map[string]string{"reason": "reconcile"}, 2},
		{"iosched_rescans_total", map[string]string{"reason": "other"}, 1},
		{"iosched_uevent_overflows_total", nil, 1},
		{"iosched_changes_total", map[string]string{"attribute": "scheduler", "rule": "virtio: none"}, 2},
		{"iosched_changes_total", map[string]string{"attribute": "nr_requests", "rule": "virtio: none"}, 1},
		{"iosched_drift_repairs_total", map[string]string{"attribute": "scheduler"}, 1},
		{"iosched_apply_errors_total", map[string]string{"attribute": "nr_requests"}, 1},
		{"iosched_policy_load_errors_total", nil, 1},
		{"iosched_last_reload_success", nil, 1},
		{"iosched_uevent_to_applied_seconds", nil, 2},
		{"iosched_disks_managed", map[string]string{"class": "virtio", "scheduler": "none"}, 3},
		{"iosched_disks_managed", map[string]string{"class": "loop", "scheduler": "mq-deadline"}, 2},
		{"iosched_disks_managed", map[string]string{"class": "ram", "scheduler": "none"}, 1},
		{"iosched_probe_iops", map[string]string{"disk": "vda", "scheduler": "none", "depth": "deep"}, 143000},
		{"iosched_probe_iops", map[string]string{"disk": "vda", "scheduler": "mq-deadline", "depth": "1"}, 8800},
		{"iosched_probe_read_latency_p99_seconds", map[string]string{"disk": "vda", "scheduler": "none", "depth": "1"}, 0.0002},
		{"iosched_probe_chosen", map[string]string{"disk": "vda", "scheduler": "none"}, 1},
		{"iosched_probe_chosen", map[string]string{"disk": "vda", "scheduler": "mq-deadline"}, 0},
		{"iosched_adapt_switches_total", map[string]string{"scheduler": "none", "guard": "false"}, 2},
		{"iosched_adapt_switches_total", map[string]string{"scheduler": "mq-deadline", "guard": "true"}, 1},
		{"iosched_adapt_busy_depth", map[string]string{"disk": "vda"}, 23.5},
		{"iosched_adapt_window_depth", map[string]string{"disk": "vda"}, 22},
		{"iosched_build_info", map[string]string{"version": "v1.2.3"}, 1},
	} {
		got, ok := value(fams, tc.name, tc.labels)
		if !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if _, ok := value(fams, "iosched_disks_managed", map[string]string{"class": "nvme"}); ok {
		t.Errorf("a class with no disk is reported")
	}
	if _, ok := value(fams, "iosched_probe_iops", map[string]string{"disk": "vdb"}); ok {
		t.Errorf("a forgotten disk's probe is still reported")
	}
	if _, ok := value(fams, "iosched_adapt_busy_depth", map[string]string{"disk": "vdb"}); ok {
		t.Errorf("a forgotten disk's adaptive depth is still reported")
	}
	at, _ := value(fams, "iosched_last_reload_timestamp_seconds", nil)
	if d := time.Since(time.Unix(int64(at), 0)); d < 0 || d > time.Minute {
		t.Errorf("iosched_last_reload_timestamp_seconds %v is not now", at)
	}
	// The latency histogram holds the 30 ms in its 0.05 s bucket.
	h := fams["iosched_uevent_to_applied_seconds"].Metric[0].Histogram
	for _, bk := range h.Bucket {
		if bk.GetUpperBound() == 0.025 && bk.GetCumulativeCount() != 0 || bk.GetUpperBound() == 0.05 && bk.GetCumulativeCount() != 2 {
			t.Errorf("bucket le=%v holds %d", bk.GetUpperBound(), bk.GetCumulativeCount())
		}
	}
	// Conventions: counters end in _total, every family has its help, no
	// label on a counter names a disk.
	for name, f := range fams {
		if (f.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %v", name, f.GetType())
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no help", name)
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "disk" && f.GetType() != dto.MetricType_GAUGE {
					t.Errorf("%s: a per-disk label on a %v", name, f.GetType())
				}
			}
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("the file's mode: %v %v, want 0644 (node_exporter runs as another user)", st.Mode(), err)
	}
}

// The file is written at most once an interval, and not at all while
// nothing changes.
func TestWritesOnlyWhenChangedAndAtMostOnceAnInterval(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "iosched.prom")
	const interval = 20 * time.Millisecond
	w := promtest.WatchFile(t, path)
	r, stop := start(t, Options{Path: path, Interval: interval})
	defer stop()
	waitWrites(t, r, w, 1) // the first tick writes the file
	first, _ := os.Stat(path)

	tries := w.Tries()
	nothingToWrite(t, r, w, tries, "with nothing recorded")
	if n := w.Writes(); n != 1 {
		t.Errorf("%d writes with nothing recorded, want 1", n)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(first.ModTime()) {
		t.Errorf("the file was rewritten with nothing recorded")
	}
	r.SetDisks(nil) // no disks, as before: nothing changed
	nothingToWrite(t, r, w, tries, "after an unchanged disk count")

	// A burst: records as fast as they come, for 20 intervals.
	begin := time.Now()
	for time.Since(begin) < 20*interval {
		r.Uevent("add", "kernel")
		r.Applied(time.Now())
	}
	elapsed := time.Since(begin)
	waitWrites(t, r, w, 2)
	if n, most := w.Writes()-1, int(elapsed/interval)+2; n > most {
		t.Errorf("%d writes in %v of records, want at most %d (one an interval)", n, elapsed, most)
	}
}

// node_exporter may read the file at any moment: it is always whole.
func TestFileAlwaysWhole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "iosched.prom")
	w := promtest.WatchFile(t, path)
	r, stop := start(t, Options{Path: path, Interval: time.Millisecond})
	defer stop()
	waitWrites(t, r, w, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; w.Writes() < 50; i++ {
			r.Changed("scheduler", "rule "+string(rune('a'+i%20)), false)
		}
	}()
	for reads := 0; w.Writes() < 50; reads++ {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fams := parse(t, b)
		if fams["iosched_build_info"] == nil || fams["iosched_uevent_to_applied_seconds"] == nil {
			t.Fatalf("a partial file:\n%s", b)
		}
	}
	wg.Wait()
	stop()
	// Nothing but the file in the directory: the temporary files are gone.
	if es, _ := os.ReadDir(filepath.Dir(path)); len(es) != 1 {
		t.Errorf("%d entries in the directory, want 1", len(es))
	}
}

// A write that fails is reported and tried again; none is lost.
func TestFailedWriteIsRetried(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "node-exporter")
	path := filepath.Join(dir, "iosched.prom")
	r, stop := start(t, Options{Path: path, Interval: 5 * time.Millisecond})
	defer stop()
	r.Overflow()
	eventually.True(t, 5*time.Second, "a write error with the directory missing", func() bool { return r.WriteError() != nil })
	if err := r.WriteError(); !strings.Contains(err.Error(), path) {
		t.Errorf("the error does not name the file: %v", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The error is cleared as the file lands: wait for both.
	eventually.True(t, 5*time.Second, "the file written once its directory is there", func() bool {
		_, err := os.Stat(path)
		return err == nil && r.WriteError() == nil
	})
	b, _ := os.ReadFile(path)
	if v, _ := value(parse(t, b), "iosched_uevent_overflows_total", nil); v != 1 {
		t.Errorf("the overflow recorded before the failure is lost: %v", v)
	}
}

// A reloaded policy may name another file, or none.
func TestSetPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.prom"), filepath.Join(dir, "b.prom")
	wa, wb := promtest.WatchFile(t, a), promtest.WatchFile(t, b)
	r, stop := start(t, Options{Path: a, Interval: 5 * time.Millisecond})
	defer stop()
	waitWrites(t, r, wa, 1)
	r.SetPath(b)
	waitWrites(t, r, wb, 1)
	eventually.True(t, 5*time.Second, "the old file removed", func() bool { _, err := os.Stat(a); return os.IsNotExist(err) })
	r.SetPath("")
	eventually.True(t, 5*time.Second, "the writer to take the path change: b removed", func() bool { _, err := os.Stat(b); return os.IsNotExist(err) })
	triesA, triesB := wa.Tries(), wb.Tries()
	r.Overflow() // recorded with no path: kept for the next file
	r.SetPath(a)
	var bb []byte
	eventually.True(t, 5*time.Second, "a written again with the overflow", func() bool {
		bb, _ = os.ReadFile(a)
		v, _ := value(promtest.Parse(t, bb), "iosched_uevent_overflows_total", nil)
		return len(bb) > 0 && v == 1
	})
	// The watch counts as it reads its events, which may lag the file.
	eventually.True(t, 5*time.Second, "the watch to count a's write", func() bool { return wa.Tries() > triesA })
	if wa.Tries() != triesA+1 || wb.Tries() != triesB {
		t.Errorf("written with no path: %d tries of a, %d of b, want one of a since", wa.Tries()-triesA, wb.Tries()-triesB)
	}
	if v, _ := value(parse(t, bb), "iosched_uevent_overflows_total", nil); v != 1 {
		t.Errorf("overflows = %v after the path came back, want 1", v)
	}
}

func TestStopWritesWhatIsLeft(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "iosched.prom")
	r, stop := start(t, Options{Path: path, Interval: time.Hour})
	r.Rescan("start")
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("nothing written at stop: %v", err)
	}
	if v, _ := value(parse(t, b), "iosched_rescans_total", map[string]string{"reason": "start"}); v != 1 {
		t.Errorf("rescans{start} = %v, want 1", v)
	}
}

func TestLastBurst(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	if b := r.LastBurst(); b.Disks != 0 {
		t.Errorf("no disk applied yet: %+v", b)
	}
	t0 := time.Unix(1_800_000_000, 0)
	// An earlier burst, 2 s before: all slow.
	for i := range 10 {
		r.burst.add(t0.Add(time.Duration(i)*time.Millisecond), 5*time.Second)
	}
	// The last one: 100 disks, 1..100 ms, applied 5 ms apart (in shuffled
	// order), ending 2 s after the first burst's end.
	start := t0.Add(2 * time.Second)
	for i := range 100 {
		k := (i * 37) % 100
		r.burst.add(start.Add(time.Duration(k)*5*time.Millisecond), time.Duration(k+1)*time.Millisecond)
	}
	b := r.LastBurst()
	if b.Disks != 100 || b.P50 != 50*time.Millisecond || b.P99 != 99*time.Millisecond || b.Max != 100*time.Millisecond ||
		!b.Start.Equal(start) || !b.End.Equal(start.Add(495*time.Millisecond)) || b.Truncated {
		t.Errorf("last burst: %+v", b)
	}
}

func TestPercentileIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, p, want int }{{1, 50, 0}, {1, 99, 0}, {2, 50, 0}, {2, 99, 1}, {100, 50, 49}, {100, 99, 98}, {1000, 99, 989}} {
		if got := percentileIndex(tc.n, tc.p); got != tc.want {
			t.Errorf("percentileIndex(%d, %d) = %d, want %d", tc.n, tc.p, got, tc.want)
		}
	}
}

// BenchmarkRecordBurst is the hot path: what one disk of a burst costs the
// daemon's pass in recording (a uevent, two changes, the latency).
//
//	go test -run '^$' -bench RecordBurst ./metrics
func BenchmarkRecordBurst(b *testing.B) {
	r := New(Options{})
	received := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Uevent("add", "kernel")
			r.Changed("scheduler", "bench loops", false)
			r.Changed("nr_requests", "bench loops", false)
			r.Applied(received)
		}
	})
}

// Under a Hold records mark the file without writing it; the release
// writes it once, whatever came in between.
func TestHoldWritesOnceAtRelease(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "iosched.prom")
	w := promtest.WatchFile(t, path)
	r, stop := start(t, Options{Path: path, Interval: time.Millisecond})
	defer stop()
	waitWrites(t, r, w, 1)
	tries := w.Tries()
	release := r.Hold()
	inner := r.Hold()
	for i := range 20 {
		r.SetAdaptDepth(fmt.Sprintf("vd%d", i), float64(i), 1)
		time.Sleep(2 * time.Millisecond) // past the interval: unheld, each could be a write
	}
	inner()
	time.Sleep(10 * time.Millisecond)
	if w.Tries() != tries {
		t.Fatalf("%d writes begun under a hold", w.Tries()-tries)
	}
	release()
	waitWrites(t, r, w, 2)
	time.Sleep(20 * time.Millisecond)
	if n := w.Tries() - tries; n != 1 {
		t.Errorf("%d writes after the release, want 1", n)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := value(parse(t, b), "iosched_adapt_busy_depth", map[string]string{"disk": "vd19"}); !ok || v != 19 {
		t.Errorf("vd19's depth after the release = %v, %v; want 19", v, ok)
	}
}
