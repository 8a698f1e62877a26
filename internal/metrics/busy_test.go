package metrics

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/promtest"
)

var testBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// An observed disk's busy time comes out as a histogram's series per disk
// (buckets cumulative, +Inf equal to the count), each untyped, so that
// node_exporter passes fractions of a second through; its I/Os as
// counters; a forgotten disk's series leave the file.
func TestBusyDepthsExposition(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	r.SetBusyDepths("vda", BusyDepths{Bounds: testBounds,
		Cumulative: []float64{0.25, 0.25, 5, 5, 5, 15.5, 15.5, 15.5, 15.5, 17.75}, Sum: 1259.5, Reads: 5600, Writes: 1000})
	r.SetBusyDepths("vdb", BusyDepths{Bounds: testBounds, Cumulative: make([]float64, 10)})
	r.SetBusyDepths("vdc", BusyDepths{Bounds: testBounds, Cumulative: make([]float64, 10), Reads: 1})
	r.SetDiskInfo("vdc", DiskInfo{Key: "k2", Class: "virtio"})
	r.SetDiskInfo("vda", DiskInfo{Key: "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", Class: "virtio", Driver: "virtio_blk", Model: "", HWQueues: "2", Rotational: "0"})
	r.ForgetObserved("vdc")
	out := r.exposition()
	fams := parse(t, out)
	for _, name := range []string{"iosched_disk_busy_depth_seconds_bucket", "iosched_disk_busy_depth_seconds_sum", "iosched_disk_busy_depth_seconds_count"} {
		if f := fams[name]; f == nil || f.GetType().String() != "UNTYPED" {
			t.Errorf("%s: %v, want an untyped family", name, f)
		}
	}
	for le, want := range map[string]float64{"1": 0.25, "4": 5, "32": 15.5, "256": 15.5, "+Inf": 17.75} {
		if v, ok := value(fams, "iosched_disk_busy_depth_seconds_bucket", map[string]string{"disk": "vda", "le": le}); !ok || v != want {
			t.Errorf("vda le=%s: %v, %v; want %v", le, v, ok, want)
		}
	}
	if v, ok := value(fams, "iosched_disk_busy_depth_seconds_count", map[string]string{"disk": "vda"}); !ok || v != 17.75 {
		t.Errorf("vda count: %v, %v", v, ok)
	}
	if v, ok := value(fams, "iosched_disk_busy_depth_seconds_sum", map[string]string{"disk": "vda"}); !ok || v != 1259.5 {
		t.Errorf("vda sum: %v, %v", v, ok)
	}
	if v, ok := value(fams, "iosched_disk_busy_depth_seconds_count", map[string]string{"disk": "vdb"}); !ok || v != 0 {
		t.Errorf("vdb count: %v, %v", v, ok)
	}
	// A disk's buckets are written in bucket order.
	const vdaKey = `key="virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0"`
	first := strings.Index(string(out), `iosched_disk_busy_depth_seconds_bucket{disk="vda",`+vdaKey+`,le="1"}`)
	inf := strings.Index(string(out), `iosched_disk_busy_depth_seconds_bucket{disk="vda",`+vdaKey+`,le="256"}`)
	if first < 0 || inf < first {
		t.Errorf("vda's buckets out of order:\n%s", out)
	}
	if v, ok := value(fams, "iosched_disk_observed_ios_total", map[string]string{"disk": "vda", "op": "write"}); !ok || v != 1000 {
		t.Errorf("vda writes = %v, %v", v, ok)
	}
	if strings.Contains(string(out), `"vdc"`) {
		t.Errorf("a forgotten disk is still in the file:\n%s", out)
	}
	if v, ok := value(fams, "iosched_disk_info", map[string]string{"disk": "vda", "class": "virtio", "driver": "virtio_blk", "hw_queues": "2", "rotational": "0",
		"key": "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0"}); !ok || v != 1 {
		t.Errorf("vda's info = %v, %v", v, ok)
	}
	// A +Inf bucket is written as such; every series of a disk carries
	// its info's key, none when it has no info.
	for _, line := range []string{
		`iosched_disk_busy_depth_seconds_bucket{disk="vda",` + vdaKey + `,le="+Inf"} 17.75`,
		`iosched_disk_busy_depth_seconds_sum{disk="vda",` + vdaKey + `} 1259.5`,
		`iosched_disk_busy_depth_seconds_count{disk="vda",` + vdaKey + `} 17.75`,
		`iosched_disk_observed_ios_total{disk="vda",` + vdaKey + `,op="read"} 5600`,
		`iosched_disk_busy_depth_seconds_count{disk="vdb"} 0`,
	} {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("no line %s:\n%s", line, out)
		}
	}
}

// promtool, Prometheus's own linter, finds nothing to say of a file with
// every series of the observed disks.
func TestBusyDepthsPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("IOSCHED_INTEGRATION") == "required" {
			t.Fatal("promtool (Debian's prometheus package) is not installed")
		}
		t.Skip("promtool (Debian's prometheus package) is not installed")
	}
	r := New(Options{Version: "v1"})
	r.SetBusyDepths("vda", BusyDepths{Bounds: testBounds,
		Cumulative: []float64{5, 5, 5, 5, 5, 15, 15, 15, 15, 17}, Sum: 1259, Reads: 5600, Writes: 1000})
	r.SetDiskInfo("vda", DiskInfo{Key: "k", Class: "virtio", Driver: "virtio_blk", HWQueues: "2", Rotational: "0"})
	r.SetProbe("vda", []ProbeResult{{Scheduler: "none", IOPS: 1000, QD1IOPS: 100, Chosen: true}})
	p := filepath.Join(t.TempDir(), "iosched.prom")
	if err := os.WriteFile(p, r.exposition(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// BenchmarkFile1000Observed renders and writes the file of a machine with
// 1000 observed disks, each probed with two candidates at the default
// probe's four depths: the time of one
// write (render and atomic replace) and the file's size, reported as
// bytes/file and series/disk.
func BenchmarkFile1000Observed(b *testing.B) {
	r := New(Options{Version: "v1"})
	const disks = 1000
	for i := range disks {
		name := fmt.Sprintf("vd%04d", i)
		r.SetDiskInfo(name, DiskInfo{Key: "virtio/virtio_blk/-/hwq2/qd256/10737418240B/6.1.0-18-amd64", Class: "virtio",
			Driver: "virtio_blk", HWQueues: "2", Rotational: "0"})
		cum := make([]float64, len(testBounds)+1)
		for j := range cum {
			cum[j] = float64(1000*i + 100*j)
		}
		r.SetBusyDepths(name, BusyDepths{Bounds: testBounds, Cumulative: cum, Sum: 12345.5, Reads: 1e9, Writes: 1e8})
		r.SetProbe(name, []ProbeResult{
			{Scheduler: "none", IOPS: 143000, QD1IOPS: 9000, P99: 900 * time.Microsecond, QD1P99: 200 * time.Microsecond, Chosen: true},
			{Scheduler: "mq-deadline", IOPS: 120000, QD1IOPS: 8800, P99: time.Millisecond, QD1P99: 210 * time.Microsecond},
		})
		curve := []CurvePoint{{Depth: 1, IOPS: 9000}, {Depth: 4, IOPS: 33000}, {Depth: 16, IOPS: 98000}, {Depth: 64, IOPS: 150000}}
		r.SetProbeCurves(name, ProbeCurves{Key: "virtio/virtio_blk/-/hwq2/qd256/10737418240B/6.1.0-18-amd64", Source: "probed",
			At: time.Unix(1700000000, 0), Curves: map[string][]CurvePoint{"none": curve, "mq-deadline": curve}})
	}
	path := filepath.Join(b.TempDir(), "iosched.prom")
	var size int
	b.ResetTimer()
	for b.Loop() { // as the writer does (flush): over the last file's buffer
		r.out = r.appendExposition(r.out)
		size = len(r.out)
		if err := writeFile(path, r.out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	fams := promtest.Parse(b, r.exposition())
	series := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				series += len(h.GetBucket()) + 2 // _bucket lines, _sum, _count
			} else {
				series++
			}
		}
	}
	b.ReportMetric(float64(size), "bytes/file")
	b.ReportMetric(float64(series)/disks, "series/disk")
}

// A disk's probe curves come out one series per candidate and depth, with
// their key (when known) and source, and the measurement's time;
// ForgetProbe drops them.
func TestProbeCurvesExposition(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	at := time.Unix(1700000000, 500000000)
	r.SetProbeCurves("vda", ProbeCurves{Key: "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", Source: "seeded", At: at, Curves: map[string][]CurvePoint{
		"none":        {{Depth: 1, IOPS: 9000}, {Depth: 32, IOPS: 143000}},
		"mq-deadline": {{Depth: 1, IOPS: 9500}, {Depth: 32, IOPS: 120000}},
	}})
	r.SetProbeCurves("vdb", ProbeCurves{Source: "probed", At: at, Curves: map[string][]CurvePoint{"none": {{Depth: 1, IOPS: 1}}}})
	r.ForgetProbe("vdb")
	out := r.exposition()
	fams := parse(t, out)
	for _, c := range []struct {
		sched, depth string
		want         float64
	}{{"none", "1", 9000}, {"none", "32", 143000}, {"mq-deadline", "1", 9500}, {"mq-deadline", "32", 120000}} {
		v, ok := value(fams, "iosched_probe_curve_iops", map[string]string{"disk": "vda", "key": "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", "scheduler": c.sched, "depth": c.depth, "source": "seeded"})
		if !ok || v != c.want {
			t.Errorf("vda %s at depth %s = %v, %v; want %v", c.sched, c.depth, v, ok, c.want)
		}
	}
	if v, ok := value(fams, "iosched_probe_timestamp_seconds", map[string]string{"disk": "vda", "key": "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", "source": "seeded"}); !ok || v != 1700000000.5 {
		t.Errorf("vda's timestamp = %v, %v", v, ok)
	}
	if strings.Contains(string(out), `"vdb"`) {
		t.Errorf("a forgotten disk's curves are still in the file:\n%s", out)
	}
}

// The probe figures, curves and info are rendered once and kept: a
// change to any of them, or a disk forgotten, shows in the next file.
func TestSettledFamiliesFollowChanges(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	has := func(when, line string, want bool) {
		t.Helper()
		if got := strings.Contains(string(r.exposition()), line+"\n"); got != want {
			t.Errorf("%s: line %s present = %v, want %v", when, line, got, want)
		}
	}
	r.SetProbe("vda", []ProbeResult{{Scheduler: "none", IOPS: 100, Chosen: true}})
	r.SetProbeCurves("vda", ProbeCurves{Key: "k", Source: "probed", Curves: map[string][]CurvePoint{"none": {{Depth: 1, IOPS: 5}}}})
	r.SetDiskInfo("vda", DiskInfo{Key: "k", Class: "virtio"})
	has("first", `iosched_probe_iops{disk="vda",scheduler="none",depth="deep"} 100`, true)
	r.SetProbe("vda", []ProbeResult{{Scheduler: "none", IOPS: 200, Chosen: true}})
	has("probe changed", `iosched_probe_iops{disk="vda",scheduler="none",depth="deep"} 200`, true)
	r.SetProbeCurves("vda", ProbeCurves{Key: "k", Source: "remembered", Curves: map[string][]CurvePoint{"none": {{Depth: 1, IOPS: 6}}}})
	has("curves changed", `iosched_probe_curve_iops{disk="vda",key="k",scheduler="none",depth="1",source="remembered"} 6`, true)
	r.SetDiskInfo("vda", DiskInfo{Key: "k", Class: "nvme"})
	has("info changed", `iosched_disk_info{disk="vda",key="k",class="nvme",driver="",model="",hw_queues="",rotational=""} 1`, true)
	r.ForgetObserved("vda")
	has("observation forgotten", `iosched_disk_info{disk="vda",key="k",class="nvme",driver="",model="",hw_queues="",rotational=""} 1`, false)
	r.ForgetProbe("vda")
	if out := string(r.exposition()); strings.Contains(out, `"vda"`) {
		t.Errorf("a forgotten disk's probe series are still in the file:\n%s", out)
	}
}
