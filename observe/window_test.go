package observe

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

var t0 = time.Unix(1_000_000, 0)

// point is a second at busy depth d, busy fraction busy, 100 IOPS of 4 KiB
// reads at latency lat µs, ending at t0+at.
func point(at time.Duration, d, busy, lat float64) Point {
	return Point{At: t0.Add(at), Elapsed: time.Second, ReadIOPS: 100, ReadFraction: 1, MeanSizeBytes: 4096,
		LatencyUs: lat, Busy: busy, QueueDepth: d * busy, BusyDepth: d}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// TestWindowOperatingPoint: the median busy depth is weighted by busy
// time (a long busy stretch at depth 32 outweighs more, shorter ones at
// depth 1), and the sums give the window's IOPS, busy fraction and latency.
func TestWindowOperatingPoint(t *testing.T) {
	w := NewWindow(time.Minute)
	// 20 s at depth 1, busy 10%; 10 s at depth 32, busy 100%.
	for i := range 20 {
		w.Add(point(time.Duration(i+1)*time.Second, 1, 0.1, 100))
	}
	for i := range 10 {
		w.Add(point(time.Duration(21+i)*time.Second, 32, 1, 3200))
	}
	s := w.Summary(t0.Add(30 * time.Second))
	if s.Covered != 30*time.Second || s.IOPS != 100 || s.ReadFraction != 1 || s.MeanSizeBytes != 4096 {
		t.Errorf("sums: %+v", s)
	}
	if !near(s.Busy, 12.0/30, 1e-9) || !near(s.LatencyUs, (20*100+10*3200)/30.0, 1e-9) {
		t.Errorf("busy %v latency %v", s.Busy, s.LatencyUs)
	}
	// Busy time: 2 s at depth 1, 10 s at depth 32: the median is 32.
	if !near(s.BusyDepth, 32, 1e-6) {
		t.Errorf("median busy depth %v, want ~32", s.BusyDepth)
	}
	if q := w.Quantile(t0.Add(30*time.Second), 0.1); !near(q, 1, 1e-6) {
		t.Errorf("10th percentile %v, want ~1", q)
	}
}

// TestWindowMedianResolution: a window at one depth reports that depth,
// at every depth a disk can run at.
func TestWindowMedianResolution(t *testing.T) {
	for _, d := range []float64{0.5, 1, 1.5, 2, 2.1, 5, 23, 32, 64, 200, 1000, 5000} {
		w := NewWindow(time.Minute)
		w.Add(point(time.Second, d, 0.5, 100))
		if got := w.Summary(t0.Add(time.Second)).BusyDepth; !near(got, d, 1e-6) {
			t.Errorf("depth %v: median %v", d, got)
		}
	}
	// Two depths in one bin (16 to 22.6) give their mean, weighted by
	// busy time.
	w := NewWindow(time.Minute)
	w.Add(point(time.Second, 16, 0.75, 100))
	w.Add(point(2*time.Second, 20, 0.25, 100))
	if got := w.Summary(t0.Add(2 * time.Second)).BusyDepth; !near(got, 17, 1e-6) {
		t.Errorf("two depths in a bin: median %v, want 17", got)
	}
}

// TestWindowForgets: points older than the window leave it, a slot at a
// time; an idle window has no depth; a point older than the window is
// not counted.
func TestWindowForgets(t *testing.T) {
	w := NewWindow(80 * time.Second) // 10 s slots
	for i := range 40 {
		w.Add(point(time.Duration(i+1)*time.Second, 32, 1, 3200))
	}
	if s := w.Summary(t0.Add(40 * time.Second)); !near(s.BusyDepth, 32, 1e-6) || s.Covered != 40*time.Second {
		t.Fatalf("before: %+v", s)
	}
	// 60 s at depth 2 follow: the depth-32 seconds leave as their slots do.
	for i := range 60 {
		w.Add(point(time.Duration(41+i)*time.Second, 2, 1, 200))
	}
	s := w.Summary(t0.Add(100 * time.Second))
	if !near(s.BusyDepth, 2, 1e-6) || s.Covered < 70*time.Second || s.Covered > 80*time.Second {
		t.Errorf("after: %+v", s)
	}
	// Nothing for the next 80 s: the window is empty.
	if s := w.Summary(t0.Add(180 * time.Second)); s != (Summary{}) || !s.Idle() {
		t.Errorf("80 s later: %+v", s)
	}
	w.Add(point(90*time.Second, 64, 1, 100))                          // older than the window now
	w.Add(Point{At: t0.Add(181 * time.Second), Elapsed: time.Second}) // an idle second
	if s := w.Summary(t0.Add(181 * time.Second)); s.BusyDepth != 0 || s.Covered != time.Second || !s.Idle() {
		t.Errorf("idle window: %+v", s)
	}
	w.Reset()
	if s := w.Summary(t0.Add(181 * time.Second)); s != (Summary{}) {
		t.Errorf("after Reset: %+v", s)
	}
}

// TestWindowSize: a window's memory is fixed, whatever it is fed.
func TestWindowSize(t *testing.T) {
	t.Logf("a Window is %d bytes", unsafe.Sizeof(Window{}))
	if n := unsafe.Sizeof(Window{}); n > 2048 {
		t.Errorf("a Window is %d bytes; 1000 disks' windows should stay within 2 MiB", n)
	}
	w := NewWindow(time.Second)
	allocs := testing.AllocsPerRun(1000, func() { w.Add(point(time.Millisecond, 4, 1, 100)) })
	if allocs != 0 {
		t.Errorf("Add allocates %v times", allocs)
	}
}

// BenchmarkWindow is one sample counted in a 10-minute window and the
// window's operating point read, as a daemon does for each disk it adapts.
func BenchmarkWindow(b *testing.B) {
	w := NewWindow(10 * time.Minute)
	at := t0
	b.ReportAllocs()
	for b.Loop() {
		at = at.Add(5 * time.Second)
		w.Add(Point{At: at, Elapsed: 5 * time.Second, ReadIOPS: 100, Busy: 0.5, QueueDepth: 4, BusyDepth: 8, LatencyUs: 100})
		if w.Summary(at).BusyDepth == 0 {
			b.Fatal("no depth")
		}
	}
}
