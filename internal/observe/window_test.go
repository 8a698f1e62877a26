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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// TestWindowLatencyNear: the latency per I/O at a depth is read from the
// bins near it, weighted by I/Os; load at depths further than the bins
// reach is left out, and the window forgets it as it forgets the rest.
func TestWindowLatencyNear(t *testing.T) {
	t.Parallel()
	w := NewWindow(80 * time.Second) // 10 s slots
	at := time.Duration(0)
	add := func(n int, d, lat float64, iops float64) {
		for range n {
			at += time.Second
			p := point(at, d, 1, lat)
			p.ReadIOPS = iops
			w.Add(p)
		}
	}
	add(10, 32, 1000, 100) // 1000 I/Os at 1 ms
	add(10, 40, 1600, 200) // 2000 at 1.6 ms: within 1.5x of 32
	add(10, 4, 50, 1000)   // far from 32
	now := t0.Add(at)
	lat, ios := w.LatencyNear(now, 32, 1.5)
	if ios != 3000 || !near(lat, (1000*1000+2000*1600)/3000.0, 1e-6) {
		t.Errorf("near 32: %v us over %v I/Os, want 1400 us over 3000", lat, ios)
	}
	if lat, ios := w.LatencyNear(now, 4, 1.5); ios != 10000 || !near(lat, 50, 1e-6) {
		t.Errorf("near 4: %v us over %v I/Os", lat, ios)
	}
	if lat, ios := w.LatencyNear(now, 256, 1.5); lat != 0 || ios != 0 {
		t.Errorf("near 256, where the disk never ran: %v us over %v I/Os", lat, ios)
	}
	// A window later the depth-32 and depth-40 seconds have left.
	add(80, 4, 50, 1000)
	if _, ios := w.LatencyNear(t0.Add(at), 32, 1.5); ios != 0 {
		t.Errorf("near 32 after it left the window: %v I/Os", ios)
	}
}

// TestNear: every depth within the factor is near, none further than the
// factor times a bin's width (1.41), and the window's own sums agree.
func TestNear(t *testing.T) {
	t.Parallel()
	const f = 1.5
	for _, d := range []float64{0.3, 1, 1.5, 2.4, 7, 23, 32, 45, 100, 900, 3000} {
		for x := d / 4; x <= d*4; x *= 1.01 {
			r := math.Max(x/d, d/x)
			got := Near(x, d, f)
			if r <= f*(1-1e-12) && !got {
				t.Errorf("Near(%v, %v) = false, %.3fx apart", x, d, r)
			}
			// Below depth 1 is one bin, and so is 1024 and above.
			if got && r > f*math.Sqrt2*(1+1e-12) && x >= 1 && d >= 1 && x < 1024 && d < 1024 {
				t.Errorf("Near(%v, %v) = true, %.3fx apart", x, d, r)
			}
			w := NewWindow(time.Minute)
			w.Add(point(time.Second, x, 1, 100))
			if _, ios := w.LatencyNear(t0.Add(time.Second), d, f); (ios > 0) != got {
				t.Errorf("depth %v near %v: Near says %v, the window has %v I/Os", x, d, got, ios)
			}
		}
	}
	if Near(0, 0.5, f) || Near(math.NaN(), 1, f) {
		t.Error("no depth is near something")
	}
}

// TestWindowRefusesNonsense: a point with a NaN or infinite figure is
// not counted, so one bad reading cannot spoil a window.
func TestWindowRefusesNonsense(t *testing.T) {
	t.Parallel()
	w := NewWindow(time.Minute)
	w.Add(point(time.Second, 8, 1, 100))
	for _, bad := range []func(*Point){
		func(p *Point) { p.BusyDepth = math.NaN() },
		func(p *Point) { p.Busy = math.Inf(1) },
		func(p *Point) { p.LatencyUs = math.NaN() },
		func(p *Point) { p.ReadIOPS = math.Inf(1) },
	} {
		p := point(2*time.Second, 8, 1, 100)
		bad(&p)
		w.Add(p)
	}
	s := w.Summary(t0.Add(2 * time.Second))
	if s.Covered != time.Second || s.BusyDepth != 8 || s.LatencyUs != 100 {
		t.Errorf("after nonsense: %+v", s)
	}
	// No busy depth: in the sums, in no bin.
	w.Add(Point{At: t0.Add(2 * time.Second), Elapsed: time.Second, ReadIOPS: 100, LatencyUs: 300, Busy: 0.5})
	s = w.Summary(t0.Add(2 * time.Second))
	if lat, ios := w.LatencyNear(t0.Add(2*time.Second), 8, 1.5); s.Covered != 2*time.Second || s.BusyDepth != 8 || ios != 100 || lat != 100 {
		t.Errorf("a point without a depth: %+v; near 8: %v us over %v I/Os", s, lat, ios)
	}
}

// TestWindowSize: a window's memory is fixed, whatever it is fed.
func TestWindowSize(t *testing.T) {
	t.Logf("a Window is %d bytes", unsafe.Sizeof(Window{}))
	if n := unsafe.Sizeof(Window{}); n > 4096 {
		t.Errorf("a Window is %d bytes; 1000 disks' windows should stay within 4 MiB", n)
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
