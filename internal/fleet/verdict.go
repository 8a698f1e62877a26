package fleet

import (
	"math"
	"slices"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/probe"
)

// BucketDepth is the depth a busy-time bucket stands for: 1 for the
// first (le 1: a busy disk has a request in flight), sqrt(lo*le) for one
// between two bounds, lo for +Inf.
func BucketDepth(depths []DepthShare, i int) float64 {
	le := depths[i].Le
	switch {
	case i == 0:
		return max(le, 1)
	case math.IsInf(le, 1):
		return depths[i-1].Le
	}
	return math.Sqrt(depths[i-1].Le * le)
}

// Weighted is the busy-time-weighted change of cand against base: the
// change at each bucket's depth (BucketDepth) and their mean weighted by
// the buckets' shares. False when either curve has no point.
func Weighted(depths []DepthShare, cand, base []probe.CurvePoint) (float64, []float64, bool) {
	if len(cand) == 0 || len(base) == 0 {
		return 0, nil, false
	}
	by := make([]float64, len(depths))
	sum, weight := 0.0, 0.0
	for i, b := range depths {
		d := BucketDepth(depths, i)
		c, ok1 := adapt.IOPSAt(cand, d)
		k, ok2 := adapt.IOPSAt(base, d)
		if !ok1 || !ok2 || k <= 0 {
			return 0, nil, false
		}
		by[i] = c/k - 1
		sum += b.Share * by[i]
		weight += b.Share
	}
	if weight <= 0 {
		return 0, nil, false
	}
	return sum / weight, by, true
}

// probePoints is a fleet curve's medians as probe points, the probe's
// depth standing for the disk's.
func probePoints(c Curve) []probe.CurvePoint {
	pts := make([]probe.CurvePoint, len(c.Points))
	for i, p := range c.Points {
		pts[i] = probe.CurvePoint{Depth: p.Depth, ObservedDepth: float64(p.Depth), IOPS: p.Median}
	}
	return pts
}

// machineCurve is one machine's curve of sched.
func (d *keyData) machineCurve(sched, machine string) []probe.CurvePoint {
	var pts []probe.CurvePoint
	for dep, byMachine := range d.curves[sched] {
		if v, ok := byMachine[machine]; ok {
			pts = append(pts, probe.CurvePoint{Depth: dep, ObservedDepth: float64(dep), IOPS: v})
		}
	}
	slices.SortFunc(pts, func(a, b probe.CurvePoint) int { return a.Depth - b.Depth })
	return pts
}

// machinesOf are the machines with a figure of sched, sorted.
func (d *keyData) machinesOf(sched string) []string {
	seen := map[string]bool{}
	for _, byMachine := range d.curves[sched] {
		for m := range byMachine {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// verdicts are each candidate's verdict against k.Kernel, whose curve
// is known to be there.
func (d *keyData) verdicts(k Key) []Verdict {
	var base []probe.CurvePoint
	for _, c := range k.Curves {
		if c.Scheduler == k.Kernel {
			base = probePoints(c)
		}
	}
	var out []Verdict
	for _, c := range k.Curves {
		if c.Scheduler == k.Kernel {
			continue
		}
		change, by, ok := Weighted(k.Depths, probePoints(c), base)
		if !ok {
			continue
		}
		v := Verdict{Scheduler: c.Scheduler, Change: change, ByDepth: by, Low: math.Inf(1), High: math.Inf(-1)}
		for _, m := range d.machinesOf(c.Scheduler) {
			mc, ok := d.machineChange(k.Depths, c.Scheduler, k.Kernel, m)
			if !ok {
				continue
			}
			v.Machines++
			v.Low, v.High = min(v.Low, mc), max(v.High, mc)
		}
		if v.Machines == 0 {
			v.Low, v.High = change, change
		}
		out = append(out, v)
	}
	return out
}

// machineChange is one machine's weighted change of sched against base.
func (d *keyData) machineChange(depths []DepthShare, sched, base, machine string) (float64, bool) {
	change, _, ok := Weighted(depths, d.machineCurve(sched, machine), d.machineCurve(base, machine))
	return change, ok
}
