package fleet

import (
	"math"
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
