package adapt

import (
	"math"
	"testing"

	"github.com/iosched/iosched/internal/probe"
)

func pts(xs ...float64) []probe.CurvePoint {
	var out []probe.CurvePoint
	for i := 0; i+1 < len(xs); i += 2 {
		out = append(out, probe.CurvePoint{Depth: int(xs[i]), ObservedDepth: xs[i], IOPS: xs[i+1]})
	}
	return out
}

func TestIOPSAt(t *testing.T) {
	t.Parallel()
	c := pts(1, 1000, 4, 3000, 16, 5000)
	for _, tc := range []struct {
		depth, want float64
	}{
		{0.2, 1000}, // below the curve: its first point
		{1, 1000},
		{2, 2000}, // halfway between 1 and 4 in log(depth)
		{4, 3000},
		{8, 4000},
		{64, 5000}, // beyond: the last point
	} {
		got, ok := IOPSAt(c, tc.depth)
		if !ok || math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("IOPSAt(%v) = %v, %v; want %v", tc.depth, got, ok, tc.want)
		}
	}
	if _, ok := IOPSAt(nil, 3); ok {
		t.Error("an empty curve gave a figure")
	}
	// Read by the disk's depth, not the probe's: a reader-bound point
	// (probe depth 32, disk depth 2) sits at 2.
	rb := []probe.CurvePoint{{Depth: 1, ObservedDepth: 1, IOPS: 100}, {Depth: 32, ObservedDepth: 2, IOPS: 200}}
	if got, _ := IOPSAt(rb, 2); got != 200 {
		t.Errorf("reader-bound curve at disk depth 2 = %v, want 200", got)
	}
}

// The figures of the linux-block discussion of a 2023 patch to make `none`
// virtio-blk's default scheduler: 4 KiB random reads at depth 128, 270K
// IOPS with mq-deadline against 450K with none (replies measured gains of
// 56-340% there), and losses down to 13.9% at depth 1. Which side of the
// crossing a disk is on depends on the depth its workload runs at.
func TestFavourKernelListFigures(t *testing.T) {
	t.Parallel()
	curves := map[string][]probe.CurvePoint{
		"none":        pts(1, 86100, 128, 450000),
		"mq-deadline": pts(1, 100000, 128, 270000),
	}
	order := []string{"none", "mq-deadline"}
	v, ok := Favour(curves, order, 1, "none")
	if !ok || v.Favoured != "mq-deadline" || v.Over != "none" || math.Abs(v.Gain()-(100000/86100.0-1)) > 1e-9 {
		t.Errorf("depth 1: %+v (gain %.3f), want mq-deadline over none by 16%%", v, v.Gain())
	}
	v, _ = Favour(curves, order, 128, "mq-deadline")
	if v.Favoured != "none" || v.Over != "mq-deadline" || math.Abs(v.Gain()-(450.0/270-1)) > 1e-9 {
		t.Errorf("depth 128: %+v, want none 1.67x mq-deadline", v)
	}
	// Current not a candidate: compared with the runner-up.
	v, _ = Favour(curves, order, 128, "kyber")
	if v.Favoured != "none" || v.Over != "mq-deadline" {
		t.Errorf("current kyber: %+v", v)
	}
	// Ties go to current.
	flat := map[string][]probe.CurvePoint{"none": pts(1, 10), "mq-deadline": pts(1, 10)}
	if v, _ := Favour(flat, order, 1, "mq-deadline"); v.Favoured != "mq-deadline" || v.Gain() != 0 {
		t.Errorf("tie: %+v, want current kept", v)
	}
	if _, ok := Favour(map[string][]probe.CurvePoint{"none": pts(1, 10)}, order, 1, "none"); ok {
		t.Error("one candidate gave a verdict")
	}
}

func TestCurvesOfOldRecord(t *testing.T) {
	t.Parallel()
	r := &probe.Record{Method: probe.Method{Depth: 32}, Figures: []probe.Candidate{
		{Scheduler: "none", Figures: probe.Figures{IOPS: 300, QD1IOPS: 90}},
		{Scheduler: "mq-deadline", Figures: probe.Figures{IOPS: 200, QD1IOPS: 100}},
	}}
	curves, order := Curves(r.Figures, r.Depth)
	if len(order) != 2 || len(curves["none"]) != 2 || curves["none"][1].ObservedDepth != 32 {
		t.Fatalf("curves %+v order %v", curves, order)
	}
	if v, _ := Favour(curves, order, 1, "none"); v.Favoured != "mq-deadline" {
		t.Errorf("depth 1 of an old record: %+v", v)
	}
	if v, _ := Favour(curves, order, 32, "mq-deadline"); v.Favoured != "none" {
		t.Errorf("depth 32 of an old record: %+v", v)
	}
}

// A reader-bound disk (a loop device over memory): the disk's depth for
// the same reads in flight depends on the scheduler, so the curves are
// compared at the load that gave the disk's depth under the current
// scheduler, not at the same disk depth. The figures are shaped like a
// probe of such a loop: at 32 reads in flight, 17.7 in the disk's count
// with none and 6.8 with mq-deadline, the two within 10% of each other.
func TestFavourReaderBound(t *testing.T) {
	t.Parallel()
	curves := map[string][]probe.CurvePoint{
		"none": {
			{Depth: 1, ObservedDepth: 0.6, IOPS: 14000}, {Depth: 4, ObservedDepth: 2.3, IOPS: 30000},
			{Depth: 16, ObservedDepth: 8, IOPS: 60000}, {Depth: 32, ObservedDepth: 17.7, IOPS: 150000},
		},
		"mq-deadline": {
			{Depth: 1, ObservedDepth: 0.6, IOPS: 14000}, {Depth: 4, ObservedDepth: 2.0, IOPS: 28000},
			{Depth: 16, ObservedDepth: 4, IOPS: 55000}, {Depth: 32, ObservedDepth: 6.8, IOPS: 140000},
		},
	}
	order := []string{"none", "mq-deadline"}
	for _, tc := range []struct {
		current     string
		depth       float64
		offered     float64
		favoured    string
		gainAtLeast float64
		gainAtMost  float64
	}{
		// Under none, the disk at 8 is the load of 16 reads in flight:
		// none 60K there, mq-deadline 55K. Read at disk depth 8, the
		// mq-deadline curve would give its 32-read figure (140K) and
		// call for a switch that would not pay.
		{current: "none", depth: 8, offered: 16, favoured: "none", gainAtLeast: 0.09, gainAtMost: 0.091},
		// Under mq-deadline, the disk at 6.8 is the load of 32: none
		// 150K against 140K.
		{current: "mq-deadline", depth: 6.8, offered: 32, favoured: "none", gainAtLeast: 0.071, gainAtMost: 0.072},
		// A scheduler without a curve: read at the disk's depth.
		{current: "kyber", depth: 4, offered: 4, favoured: "mq-deadline"},
	} {
		v, ok := Favour(curves, order, tc.depth, tc.current)
		if !ok || v.Favoured != tc.favoured || math.Abs(v.Offered-tc.offered) > 1e-9 {
			t.Errorf("%s at disk depth %v: %+v, want %s favoured at probe depth %v", tc.current, tc.depth, v, tc.favoured, tc.offered)
			continue
		}
		if tc.gainAtMost > 0 && (v.Gain() < tc.gainAtLeast || v.Gain() > tc.gainAtMost) {
			t.Errorf("%s at disk depth %v: gain %.4f, want %.3f-%.3f", tc.current, tc.depth, v.Gain(), tc.gainAtLeast, tc.gainAtMost)
		}
	}
}

func TestVerdictWhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    Verdict
		want string
	}{
		{Verdict{Depth: 23, Offered: 23}, "depth 23"},
		{Verdict{Depth: 23, Offered: 24}, "depth 23"},
		{Verdict{Depth: 6.8, Offered: 32}, "depth 6.8 (the load of 32 reads in flight)"},
		{Verdict{Depth: 2}, "depth 2"},
	} {
		if got := tc.v.Where(); got != tc.want {
			t.Errorf("%+v.Where() = %q, want %q", tc.v, got, tc.want)
		}
	}
}
