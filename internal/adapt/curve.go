package adapt

import (
	"math"
	"slices"
	"sort"

	"github.com/iosched/iosched/internal/probe"
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
	return pts.interpolate(depth, observedDepth, iops)
}

// offered is the reads the probe kept in flight when the disk counted
// depth on this curve: the curve's own mapping of its Depth to its
// ObservedDepth, read backwards.
func (pts curve) offered(depth float64) float64 {
	// Log-linear in both depths: where the two agree, this gives depth
	// back exactly.
	d, _ := pts.interpolate(depth, observedDepth, logProbeDepth)
	return math.Exp(d)
}

func observedDepth(p probe.CurvePoint) float64 { return p.ObservedDepth }
func probeDepth(p probe.CurvePoint) float64    { return float64(p.Depth) }
func logProbeDepth(p probe.CurvePoint) float64 { return math.Log(float64(p.Depth)) }
func iops(p probe.CurvePoint) float64          { return p.IOPS }

// interpolate reads y at x on pts, sorted by x: linear in log(x) between
// two points, flat beyond the ends. It allocates nothing.
func (pts curve) interpolate(x float64, xOf, yOf func(probe.CurvePoint) float64) (float64, bool) {
	if len(pts) == 0 {
		return 0, false
	}
	if x <= xOf(pts[0]) {
		return yOf(pts[0]), true
	}
	last := pts[len(pts)-1]
	if x >= xOf(last) {
		return yOf(last), true
	}
	i := sort.Search(len(pts), func(i int) bool { return xOf(pts[i]) >= x })
	a, b := pts[i-1], pts[i]
	if xOf(b) == xOf(a) {
		return yOf(b), true
	}
	f := (math.Log(x) - math.Log(xOf(a))) / (math.Log(xOf(b)) - math.Log(xOf(a)))
	return yOf(a) + f*(yOf(b)-yOf(a)), true
}

// byDepth is pts sorted by the probe's depth, in a new slice.
func (pts curve) byDepth() curve {
	out := slices.Clone(pts)
	slices.SortStableFunc(out, func(a, b probe.CurvePoint) int { return a.Depth - b.Depth })
	return out
}

// Verdict is what the curves say at one depth.
type Verdict struct {
	// Depth is the disk depth the curves were read at.
	Depth float64
	// Offered is the probe depth the candidates were compared at: the
	// reads in flight that made the disk count Depth with the current
	// scheduler, by its curve (Favour says why); Depth itself when the
	// current scheduler has no curve.
	Offered float64
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

// Where says where the curves were read: "depth 23", or, when the load
// the probe offered differs from the disk's depth by more than a tenth,
// "depth 6.8 (the load of 32 reads in flight)".
func (v Verdict) Where() string {
	w := "depth " + fmtDepth(v.Depth)
	if v.Offered > 0 && math.Abs(v.Offered-v.Depth) > v.Depth/10 {
		w += " (the load of " + fmtDepth(v.Offered) + " reads in flight)"
	}
	return w
}

// Favour names the candidate the curves favour for the load that makes
// the disk count depth requests in flight under current (the disk's
// scheduler now), compared with current when current is another
// candidate, else with the runner-up. Ties go to current, then to the
// candidate named first in order (the probe's candidate order), so a
// verdict never changes with map order. False with fewer than two
// candidates whose curve has a figure.
//
// The disk's depth depends on the scheduler, not only on the load, where
// the reader rather than the disk is the bottleneck: on a loop device
// over memory, 32 reads in flight were 17.7 in the disk's count with none
// and 6.8 with mq-deadline. Reading every curve at the same disk depth
// would then compare unlike loads. So the load is found on current's
// curve (the probe depth that gave this disk depth under current), and
// the candidates are compared at that probe depth. Where requests spend
// their time in the device, the two depths agree and this is the same as
// reading every curve at depth. Without a curve for current (a scheduler
// the probe did not measure), the curves are read at depth.
func Favour(curves map[string][]probe.CurvePoint, order []string, depth float64, current string) (Verdict, bool) {
	return candidatesOf(curves, order).favour(depth, current)
}

// candidate is one candidate's measured curve.
type candidate struct {
	name  string
	curve curve // by ObservedDepth
	load  curve // by Depth: the reads the probe kept in flight
}

// candidates are the candidates whose curve has a figure, in order: what
// Favour reads, made once.
type candidates []candidate

func candidatesOf(curves map[string][]probe.CurvePoint, order []string) candidates {
	var cs candidates
	for _, name := range order {
		if c := measured(curves[name]); len(c) > 0 {
			cs = append(cs, candidate{name, c, c.byDepth()})
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
	offered, known := depth, false
	for i := range cs {
		if cs[i].name == current {
			offered, known = cs[i].curve.offered(depth), true
		}
	}
	at := func(i int) float64 {
		if !known {
			v, _ := cs[i].curve.iopsAt(depth)
			return v
		}
		v, _ := cs[i].load.interpolate(offered, probeDepth, iops)
		return v
	}
	best, bestIOPS := 0, at(0)
	for i := 1; i < len(cs); i++ {
		if v := at(i); v > bestIOPS || (v == bestIOPS && cs[i].name == current) {
			best, bestIOPS = i, v
		}
	}
	over, overIOPS := -1, 0.0
	for i := range cs {
		if i == best {
			continue
		}
		v := at(i)
		if cs[i].name == current {
			over, overIOPS = i, v
			break
		}
		if over < 0 || v > overIOPS {
			over, overIOPS = i, v
		}
	}
	return Verdict{Depth: depth, Offered: offered, Favoured: cs[best].name, FavouredIOPS: bestIOPS, Over: cs[over].name, OverIOPS: overIOPS}, true
}

// Curves are a probe result's curves by candidate (a Report's Candidates
// or a Record's Figures, measured at deep reads in flight), in the
// probe's candidate order; a result from before curves counts as two
// points (Candidate.Points).
func Curves(figures []probe.Candidate, deep int) (map[string][]probe.CurvePoint, []string) {
	curves := make(map[string][]probe.CurvePoint, len(figures))
	order := make([]string, 0, len(figures))
	for _, c := range figures {
		curves[c.Scheduler] = c.Points(deep)
		order = append(order, c.Scheduler)
	}
	return curves, order
}
