package fleet

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/probe"
)

// Each bucket stands for one depth: 1, the geometric middle of its
// bounds, the last finite bound for +Inf.
func TestBucketDepth(t *testing.T) {
	t.Parallel()
	ds := []DepthShare{{Le: 1}, {Le: 2}, {Le: 4}, {Le: 256}, {Le: math.Inf(1)}}
	for i, want := range []float64{1, math.Sqrt2, math.Sqrt(8), 32, 256} {
		if got := BucketDepth(ds, i); !near(got, want) {
			t.Errorf("bucket %d (le %g): depth %g, want %g", i, ds[i].Le, got, want)
		}
	}
}

// The change is each bucket's, weighted by its share; a curve with no
// point gives none.
func TestWeighted(t *testing.T) {
	t.Parallel()
	pt := func(d int, iops float64) probe.CurvePoint {
		return probe.CurvePoint{Depth: d, ObservedDepth: float64(d), IOPS: iops}
	}
	cand := []probe.CurvePoint{pt(1, 90), pt(64, 2000)}
	base := []probe.CurvePoint{pt(1, 100), pt(64, 1000)}
	// A quarter of busy time at depth 1 (-10%), three quarters past 256,
	// where both curves stay at their depth-64 figures (+100%).
	ds := []DepthShare{{Le: 1, Share: 0.25}, {Le: 256}, {Le: math.Inf(1), Share: 0.75}}
	got, by, ok := Weighted(ds, cand, base)
	if !ok || !near(got, 0.25*-0.1+0.75*1) || !near(by[0], -0.1) || !near(by[2], 1) {
		t.Errorf("Weighted = %g, %v, %v; want %g", got, by, ok, 0.25*-0.1+0.75*1)
	}
	if _, _, ok := Weighted(ds, nil, base); ok {
		t.Error("a candidate with no curve has a verdict")
	}
}

// Cumulative busy seconds become each bucket's share; a bucket that
// increase()'s extrapolation left below the one before counts as empty.
func TestShares(t *testing.T) {
	t.Parallel()
	got, hours := shares(map[float64]float64{1: 1800, 2: 1790, 4: 2700, math.Inf(1): 3600})
	want := []float64{0.5, 0, 0.25, 0.25}
	if len(got) != len(want) || !near(hours, 1) {
		t.Fatalf("shares = %+v, %g hours", got, hours)
	}
	for i, w := range want {
		if !near(got[i].Share, w) {
			t.Errorf("bucket %d: share %g, want %g", i, got[i].Share, w)
		}
	}
	if got, hours := shares(map[float64]float64{1: 0, math.Inf(1): 0}); got != nil || hours != 0 {
		t.Errorf("no busy time: %+v, %g", got, hours)
	}
}

// TestReportJSONRoundTrip: a report read back from its JSON (`iosched
// fleet --json`) is the one written, the +Inf bucket included; a bucket
// bound that is not a number is refused, saying which.
func TestReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	rep := Report{Keys: []Key{{Key: "virtio/virtio_blk/-/hwq2/qd256/1073741824B/6.1.0", Machines: 2, Disks: 3, BusyHours: 1.5,
		Depths:   []DepthShare{{Le: 1, Share: 0.25}, {Le: 2, Share: 0.5}, {Le: math.Inf(1), Share: 0.25}},
		Curves:   []Curve{{Scheduler: "none", Points: []CurvePoint{{Depth: 1, Median: 9000.5, Min: 9000, Max: 9001, Machines: 2}}}},
		Kernel:   "none",
		Verdicts: []Verdict{{Scheduler: "mq-deadline", Change: -0.1, Low: -0.2, High: 0, Machines: 2, ByDepth: []float64{-0.1, -0.1, -0.1}}},
	}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("read back\n%+v\nwrote\n%+v", back, rep)
	}
	var d DepthShare
	if err := json.Unmarshal([]byte(`{"le":"deep","share":1}`), &d); err == nil || !strings.Contains(err.Error(), `"deep"`) {
		t.Errorf("le \"deep\": %v", err)
	}
}
