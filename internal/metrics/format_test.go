package metrics

import (
	"math"
	"testing"
	"time"
)

// Label values a rule name can hold (quotes, backslashes, newlines, UTF-8)
// come back unchanged through the format's parser, and the histogram's
// buckets are cumulative with the +Inf bucket equal to the count.
func TestExpositionEscapesAndHistogram(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	rule := "ssd \"fast\" \\ path\nsecond line, é"
	r.Changed("scheduler", rule, false)
	now := time.Now()
	for _, d := range []time.Duration{500 * time.Microsecond, 3 * time.Millisecond, 3 * time.Millisecond, 20 * time.Second} {
		r.Applied(now.Add(-d))
	}
	fams := parse(t, r.exposition())
	if v, ok := value(fams, "iosched_changes_total", map[string]string{"rule": rule}); !ok || v != 1 {
		t.Errorf("the rule's label came back otherwise: %v %v", v, ok)
	}
	h := fams["iosched_uevent_to_applied_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 4 || h.GetSampleSum() < 20 || h.GetSampleSum() > 21 {
		t.Errorf("count %d sum %v, want 4 and about 20.0065", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{0.001: 1, 0.005: 3, 10: 3, math.Inf(1): 4}
	var last uint64
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() < last {
			t.Errorf("bucket le=%v: %d after %d: not cumulative", b.GetUpperBound(), b.GetCumulativeCount(), last)
		}
		last = b.GetCumulativeCount()
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v = %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if last != 4 {
		t.Errorf("the +Inf bucket %d, want the count, 4", last)
	}
	if formatFloat(math.Inf(1)) != "+Inf" || formatFloat(0.25) != "0.25" || formatFloat(1e-9) != "1e-09" {
		t.Errorf("formatFloat: %q %q %q", formatFloat(math.Inf(1)), formatFloat(0.25), formatFloat(1e-9))
	}
}

// What a pass records costs no allocation: a burst of a thousand disks
// records thousands of times at once.
func TestRecordingDoesNotAllocate(t *testing.T) {
	r := New(Options{})
	r.Changed("scheduler", "rule", true) // the counters exist from the first
	r.ApplyFailed("nr_requests")
	received := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		r.Uevent("add", "kernel")
		r.Changed("scheduler", "rule", true)
		r.ApplyFailed("nr_requests")
		r.Applied(received)
	}); n != 0 {
		t.Errorf("%v allocations a pass's recording", n)
	}
}
