package observe

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		depth float64
		want  int
	}{{0.5, 0}, {1, 0}, {1.01, 1}, {2, 1}, {3, 2}, {23, 5}, {256, 8}, {257, 9}, {1e6, 9}} {
		if got := Bucket(c.depth); got != c.want {
			t.Errorf("Bucket(%v) = %d, want %d", c.depth, got, c.want)
		}
	}
}

// TestDepthsAdd: each interval's busy seconds land in the bucket of its
// busy depth, the sum is the time in flight, the counts the I/Os; an
// idle interval adds counts only and a reset adds nothing.
func TestDepthsAdd(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	samples := []Sample{
		{At: at(0), Stat: Stat{ReadIOs: 100, WriteIOs: 10, IOTicks: 0, TimeInQueue: 0}},
		// 10 s, busy 5 s, 5 s × 1 in flight: depth 1.
		{At: at(10), Stat: Stat{ReadIOs: 600, WriteIOs: 10, IOTicks: 5000, TimeInQueue: 5000}},
		// 10 s, busy 10 s, 230 s in flight: depth 23.
		{At: at(20), Stat: Stat{ReadIOs: 5600, WriteIOs: 1010, IOTicks: 15000, TimeInQueue: 235000}},
		// Idle 10 s.
		{At: at(30), Stat: Stat{ReadIOs: 5600, WriteIOs: 1010, IOTicks: 15000, TimeInQueue: 235000}},
		// 10 s, busy 2 s at depth 512.
		{At: at(40), Stat: Stat{ReadIOs: 5700, WriteIOs: 1010, IOTicks: 17000, TimeInQueue: 235000 + 1024000}},
	}
	var d Depths
	for i := 1; i < len(samples); i++ {
		if err := d.Add(samples[i-1], samples[i]); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
	var want [len(DepthBounds) + 1]float64
	want[0], want[5], want[9] = 5, 10, 2
	if d.Busy != want {
		t.Errorf("Busy = %v, want %v", d.Busy, want)
	}
	if d.Count() != 17 || d.Sum != 5+230+1024 {
		t.Errorf("Count %v Sum %v, want 17 and 1259", d.Count(), d.Sum)
	}
	if c := d.Cumulative(); c[0] != 5 || c[4] != 5 || c[5] != 15 || c[8] != 15 || c[9] != 17 {
		t.Errorf("Cumulative = %v", c)
	}
	if d.Reads != 5600 || d.Writes != 1000 {
		t.Errorf("Reads %d Writes %d, want 5600 and 1000", d.Reads, d.Writes)
	}

	before := d
	reset := Sample{At: at(50), Stat: Stat{ReadIOs: 3}}
	if err := d.Add(samples[len(samples)-1], reset); !errors.Is(err, ErrWentBack) {
		t.Errorf("a reset: %v, want ErrWentBack", err)
	}
	if d != before {
		t.Errorf("a reset changed the totals: %+v", d)
	}
}

// TestObserver: the first step is the baseline, later steps add, a reset
// starts again from the new counters, a vanished file is an error that
// keeps the totals.
func TestObserver(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "stat")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10 0 0 0 0 0 0 0 0 0 0\n")
	o, err := NewObserver(p)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	step := func() {
		t.Helper()
		if err := o.Step(); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if d := o.Depths(); d != (Depths{}) {
		t.Errorf("the baseline added %+v", d)
	}
	write("30 0 0 0 5 0 0 0 0 0 0\n")
	step()
	if d := o.Depths(); d.Reads != 20 || d.Writes != 5 {
		t.Errorf("after a step: %+v, want 20 reads, 5 writes", d)
	}
	write("1 0 0 0 0 0 0 0 0 0 0\n") // another disk of the name
	step()
	write("4 0 0 0 0 0 0 0 0 0 0\n")
	step()
	if d := o.Depths(); d.Reads != 23 || d.Writes != 5 {
		t.Errorf("after a reset and a step: %+v, want 23 reads, 5 writes", d)
	}
	write("")
	if err := o.Step(); err == nil {
		t.Error("an empty stat file gave no error")
	}
	if d := o.Depths(); d.Reads != 23 {
		t.Errorf("a failed step changed the totals: %+v", d)
	}
}

// TestDepthsBusyPastElapsed: an interval whose io_ticks went past its
// elapsed time (the kernel rounds busy time to its ticks) keeps its depth,
// time in flight over busy time, and its busy seconds, so the totals over
// intervals are io_ticks' and time_in_queue's own, as a reader of the
// stat file computes them over the whole span.
func TestDepthsBusyPastElapsed(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	a := Sample{At: t0, Stat: Stat{ReadIOs: 0}}
	// 1 s elapsed, 1010 ms busy (within the rounding Between allows),
	// 2020 ms in flight: depth 2, not 2.02.
	b := Sample{At: t0.Add(time.Second), Stat: Stat{ReadIOs: 100, IOTicks: 1010, TimeInQueue: 2020}}
	// The next 1 s gives the 10 ms back: 990 ms busy at depth 4.
	c := Sample{At: t0.Add(2 * time.Second), Stat: Stat{ReadIOs: 200, IOTicks: 2000, TimeInQueue: 2020 + 3960}}
	p, err := Between(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Busy != 1 || p.BusyDepth != 2 {
		t.Errorf("Busy %v BusyDepth %v, want 1 and 2", p.Busy, p.BusyDepth)
	}
	var d Depths
	if err := d.Add(a, b); err != nil {
		t.Fatal(err)
	}
	if err := d.Add(b, c); err != nil {
		t.Fatal(err)
	}
	if d.Busy[1] != 1.01 || d.Busy[2] != 0.99 || d.Count() != 2 {
		t.Errorf("Busy = %v (count %v), want 1.01 s at depth (1,2], 0.99 s at (2,4], 2 s in all", d.Busy, d.Count())
	}
	if want := (2020.0 + 3960) / 1000; math.Abs(d.Sum-want) > 1e-9 {
		t.Errorf("Sum %v, want the time in flight, %v", d.Sum, want)
	}
}
