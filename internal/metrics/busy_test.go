package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var testBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// An observed disk's busy time comes out as a histogram per disk (buckets
// cumulative, +Inf equal to the count), its I/Os as counters; a
// forgotten disk's series leave the file.
func TestBusyDepthsExposition(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	r.SetBusyDepths("vda", BusyDepths{Bounds: testBounds,
		Cumulative: []float64{5, 5, 5, 5, 5, 15, 15, 15, 15, 17}, Sum: 1259, Reads: 5600, Writes: 1000})
	r.SetBusyDepths("vdb", BusyDepths{Bounds: testBounds, Cumulative: make([]float64, 10)})
	r.SetBusyDepths("vdc", BusyDepths{Bounds: testBounds, Cumulative: make([]float64, 10), Reads: 1})
	r.SetDiskInfo("vdc", DiskInfo{Key: "k2", Class: "virtio"})
	r.SetDiskInfo("vda", DiskInfo{Key: "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", Class: "virtio", Driver: "virtio_blk", Model: "", HWQueues: "2", Rotational: "0"})
	r.ForgetObserved("vdc")
	out := r.exposition()
	fams := parse(t, out)
	f := fams["iosched_disk_busy_depth_seconds"]
	if f == nil || len(f.GetMetric()) != 2 {
		t.Fatalf("busy depth family: %v", f)
	}
	for _, m := range f.GetMetric() {
		disk := m.GetLabel()[0].GetValue()
		h := m.GetHistogram()
		switch disk {
		case "vda":
			if h.GetSampleCount() != 17 || h.GetSampleSum() != 1259 {
				t.Errorf("vda: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
			want := map[float64]uint64{1: 5, 16: 5, 32: 15, 256: 15}
			for _, b := range h.GetBucket() {
				if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
					t.Errorf("vda le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
				}
			}
		case "vdb":
			if h.GetSampleCount() != 0 {
				t.Errorf("vdb: count %d", h.GetSampleCount())
			}
		default:
			t.Errorf("a series of disk %q", disk)
		}
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
	// A +Inf bucket is written as such.
	if !strings.Contains(string(out), `iosched_disk_busy_depth_seconds_bucket{disk="vda",le="+Inf"} 17`) {
		t.Errorf("no +Inf bucket of 17 for vda:\n%s", out)
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
