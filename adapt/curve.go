package adapt

import (
	"math"
	"slices"
	"sort"

	"github.com/iosched/iosched/probe"
)

// IOPSAt is the IOPS a curve expects at a disk depth (requests in flight
// as the disk counts them): read by ObservedDepth, linear in log(depth)
// between two points, and flat beyond the curve's ends (a curve says
// nothing past what was measured, so the nearest measurement stands).
// False when the curve has no point with IOPS.
func IOPSAt(points []probe.CurvePoint, depth float64) (float64, bool) {
	return measured(points).iopsAt(depth)
}

// curve is a curve's points with IOPS, by ObservedDepth: what IOPSAt
// reads, made once.
type curve []probe.CurvePoint

// measured is points' curve, in a new slice.
func measured(points []probe.CurvePoint) curve {
	pts := make(curve, 0, len(points))
	for _, p := range points {
		if p.IOPS > 0 && p.ObservedDepth > 0 {
			pts = append(pts, p)
		}
	}
	slices.SortStableFunc(pts, func(a, b probe.CurvePoint) int {
		switch {
		case a.ObservedDepth < b.ObservedDepth:
			return -1
		case a.ObservedDepth > b.ObservedDepth:
			return 1
		}
		return 0
	})
	return pts
}

// iopsAt is IOPSAt of a measured curve; it allocates nothing.
func (pts curve) iopsAt(depth float64) (float64, bool) {
	if len(pts) == 0 {
		return 0, false
	}
	if depth <= pts[0].ObservedDepth {
		return pts[0].IOPS, true
	}
	last := pts[len(pts)-1]
	if depth >= last.ObservedDepth {
		return last.IOPS, true
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].ObservedDepth >= depth })
	a, b := pts[i-1], pts[i]
	if b.ObservedDepth == a.ObservedDepth {
		return b.IOPS, true
	}
	f := (math.Log(depth) - math.Log(a.ObservedDepth)) / (math.Log(b.ObservedDepth) - math.Log(a.ObservedDepth))
	return a.IOPS + f*(b.IOPS-a.IOPS), true
}

// Verdict is what the curves say at one depth.
type Verdict struct {
	// Depth is the disk depth the curves were read at.
	Depth float64
	// Favoured is the candidate with the most IOPS there.
	Favoured string
	// Over is what Favoured is compared with: the current scheduler when
	// it is another candidate, else the runner-up.
	Over string
	// FavouredIOPS and OverIOPS are the curves' figures at Depth.
	FavouredIOPS, OverIOPS float64
}

// Gain is how much Favoured is expected to beat Over by: 0.52 for 1.52x.
func (v Verdict) Gain() float64 {
	if v.OverIOPS <= 0 {
		return 0
	}
	return v.FavouredIOPS/v.OverIOPS - 1
}

// Favour reads every candidate's curve at depth and names the favoured
// one, compared with current (the disk's scheduler now) when current is
// another candidate, else with the runner-up. Ties go to current, then to
// the candidate named first in order (the probe's candidate order), so a
// verdict never changes with map order. False with fewer than two
// candidates whose curve has a figure.
func Favour(curves map[string][]probe.CurvePoint, order []string, depth float64, current string) (Verdict, bool) {
	return candidatesOf(curves, order).favour(depth, current)
}

// candidate is one candidate's measured curve.
type candidate struct {
	name  string
	curve curve
}

// candidates are the candidates whose curve has a figure, in order: what
// Favour reads, made once.
type candidates []candidate

func candidatesOf(curves map[string][]probe.CurvePoint, order []string) candidates {
	var cs candidates
	for _, name := range order {
		if c := measured(curves[name]); len(c) > 0 {
			cs = append(cs, candidate{name, c})
		}
	}
	return cs
}

// favour is Favour on cs; it allocates nothing, so a controller can ask
// it every sample.
func (cs candidates) favour(depth float64, current string) (Verdict, bool) {
	if len(cs) < 2 {
		return Verdict{}, false
	}
	iops := func(i int) float64 {
		v, _ := cs[i].curve.iopsAt(depth)
		return v
	}
	best, bestIOPS := 0, iops(0)
	for i := 1; i < len(cs); i++ {
		if v := iops(i); v > bestIOPS || (v == bestIOPS && cs[i].name == current) {
			best, bestIOPS = i, v
		}
	}
	over, overIOPS := -1, 0.0
	for i := range cs {
		if i == best {
			continue
		}
		v := iops(i)
		if cs[i].name == current {
			over, overIOPS = i, v
			break
		}
		if over < 0 || v > overIOPS {
			over, overIOPS = i, v
		}
	}
	return Verdict{Depth: depth, Favoured: cs[best].name, FavouredIOPS: bestIOPS, Over: cs[over].name, OverIOPS: overIOPS}, true
}

// Curves are a probe record's curves by candidate, in the record's
// candidate order; a record from before curves counts as two points
// (Candidate.Points).
func Curves(r *probe.Record) (map[string][]probe.CurvePoint, []string) {
	curves := make(map[string][]probe.CurvePoint, len(r.Figures))
	order := make([]string, 0, len(r.Figures))
	for _, c := range r.Figures {
		curves[c.Scheduler] = c.Points(r.Depth)
		order = append(order, c.Scheduler)
	}
	return curves, order
}
