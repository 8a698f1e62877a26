package adapt

import (
	"fmt"
	"math"
	"time"

	"github.com/iosched/iosched/internal/observe"
)

// The guard rail. After a switch it compares the latency per I/O at the
// switch's operating point (busy depths near it, observe.Near) over a
// window after the switch with the window before it, and switches back,
// pinning the disk, when it got worse by more than the margin. Worse is
// blamed on the switch only when the rise starts with it: a cloud disk's
// latency also jumps when its burst credits run out (IOPS fall to the
// baseline), which may happen just before a switch, with it, or just
// after it, and going back would then be a switch for nothing and a day's
// pin on the wrong scheduler. So:
//
//   - the sample spanning the switch is left out: its I/Os ran partly
//     under the old scheduler and waited for the queue's freeze while the
//     switch was written (the first sample after the decision, and any
//     the owner marks Switching: the write came later);
//   - a rise already under way before the switch (each of the last
//     samples worse than the window by more than the margin: one slow
//     sample, a stall of the machine, is no rise) is not compared at all
//     (the guard cannot tell the switch's part);
//   - a rise that starts after the switch (the first sample after the one
//     spanning it is within the margin) is not the switch's: a scheduler
//     acts from its first I/O;
//   - a rise at a rate ceiling (the samples after the switch deliver the
//     same IOPS at shallower and deeper busy depths, so latency grows
//     with depth: the disk is throughput-bound, not scheduler-bound) is
//     not the switch's;
//   - after a switch back, a review: when latency stays as bad under the
//     scheduler it went back to, the switch back did not help, the rise
//     was not the switch's doing, and the pin is lifted (Decision.Unpin).

// recentN is how many of the last busy samples before a switch the guard
// reads for a rise already under way.
const recentN = 2

// recentFactor is how close to the switch's operating point a recent
// sample's busy depth must be to count as a rise under way: closer than
// the guard's comparison (GuardFactor), since latency grows with depth on
// a busy disk and a load that deepened is no rise.
const recentFactor = 1.2

// rateSpread is how far the busy depths of the samples after a switch
// must spread for the guard to tell a rate ceiling (the same IOPS at every
// depth) from a scheduler's doing (more IOPS at the deeper ones).
const rateSpread = 1.2

type recentSample struct {
	depth, ios, latNs float64
}

// recentSamples are the last recentN busy samples, a ring.
type recentSamples struct {
	s       [recentN]recentSample
	next, n int
}

func (r *recentSamples) add(s Sample, dur time.Duration) {
	if s.idle() {
		return
	}
	r.s[r.next] = recentSample{depth: s.BusyDepth, ios: s.IOPS * dur.Seconds(), latNs: float64(s.Latency)}
	r.next = (r.next + 1) % recentN
	r.n = min(r.n+1, recentN)
}

// rising reports whether each of the recentN last busy samples was
// within recentFactor of depth and slower than latNs, and returns the
// fastest of them (ns).
func (r *recentSamples) rising(depth, latNs float64) (float64, bool) {
	if r.n < recentN {
		return 0, false
	}
	least := math.Inf(1)
	for _, s := range r.s {
		if s.depth < depth/recentFactor || s.depth > depth*recentFactor || !(s.latNs > latNs) {
			return 0, false
		}
		least = min(least, s.latNs)
	}
	return least, true
}

// spread sums the samples after a switch for the slope of log IOPS over
// log busy depth, each weighted by the time it covers: near 1 when the
// disk serves more at a deeper load (its scheduler and service set the
// latency), near 0 at a rate ceiling (latency grows with depth).
type spread struct {
	t, x, y, xx, xy float64
	lo, hi          float64 // the shallowest and deepest busy depths
}

func (p *spread) add(depth, iops, t float64) {
	x, y := math.Log(depth), math.Log(iops)
	p.t += t
	p.x += t * x
	p.y += t * y
	p.xx += t * x * x
	p.xy += t * x * y
	if p.lo == 0 || depth < p.lo {
		p.lo = depth
	}
	p.hi = max(p.hi, depth)
}

// ceiling reports whether the samples ran at a rate ceiling: their busy
// depths spread (a standard deviation of log depth of at least half of
// log rateSpread) and their IOPS grew by less than a quarter as fast as
// the depth.
func (p *spread) ceiling() (slope float64, ok bool) {
	if p.t <= 0 {
		return 0, false
	}
	mx, my := p.x/p.t, p.y/p.t
	vx := p.xx/p.t - mx*mx
	if vx <= 0 || math.Sqrt(vx) < math.Log(rateSpread)/2 {
		return 0, false
	}
	slope = (p.xy/p.t - mx*my) / vx
	return slope, slope < maxCeilingSlope
}

// maxCeilingSlope: IOPS that grow by less than a quarter as fast as the
// depth are flat at a ceiling.
const maxCeilingSlope = 0.25

// guard is an open guard-rail comparison of the last switch.
type guard struct {
	from, to string
	at       time.Time
	// depth and before are the operating point and the latency per I/O
	// in nanoseconds (I/O-weighted mean over the window's load near
	// depth) before the switch.
	depth  float64
	before float64
	// spanned: the sample spanning the switch has been seen (and left
	// out).
	spanned bool
	// first is the latency (ns) of the first sample near depth after
	// the one spanning the switch.
	first float64
	// The samples near depth after the switch: latency x I/Os, I/Os,
	// and the time they cover; below and at or above depth.
	latIOs, ios float64
	covered     time.Duration
	spread      spread
}

// review is the guard's second look at its switch back.
type review struct {
	blamed, back string // the scheduler switched back from, and to
	at           time.Time
	depth        float64
	bad          float64 // latency per I/O (ns) under blamed
	spanned      bool
	latIOs, ios  float64
	covered      time.Duration
}

// openGuard records the latency per I/O at the window's operating point
// before a switch to to, unless it was already rising.
func (c *Controller) openGuard(now time.Time, from, to string, depth float64) {
	latUs, ios := c.window.LatencyNear(now, depth, GuardFactor)
	if ios <= 0 {
		return
	}
	before := latUs * float64(time.Microsecond)
	if least, ok := c.recent.rising(depth, before*(1+c.opt.Margin)); ok {
		c.verdict = fmt.Sprintf("guard: latency per I/O at busy depth %s was already rising before the switch to %s (at least %s in each of the last %d samples, %s over the window): not compared, a rise under way is not the switch's doing",
			fmtDepth(depth), to, fmtLatency(least), recentN, fmtLatency(before))
		return
	}
	c.guard = &guard{from: from, to: to, at: now, depth: depth, before: before}
}

// judgeGuard adds s to an open guard's comparison and, once the samples
// after the switch at a similar depth cover half a window (and a whole
// window has passed), compares: worse by more than the margin, by the
// switch's doing, switches back, pins the disk and opens a review. A
// guard that finds no comparable load for a day closes without a verdict.
func (c *Controller) judgeGuard(s Sample, dur time.Duration) (Decision, bool) {
	g := c.guard
	if g == nil {
		return Decision{}, false
	}
	if s.At.Sub(g.at) >= day {
		c.guard = nil
		return Decision{}, false
	}
	if !g.spanned || s.Switching {
		g.spanned = true
		return Decision{}, false
	}
	if !s.idle() && observe.Near(s.BusyDepth, g.depth, GuardFactor) {
		n := s.IOPS * dur.Seconds()
		if g.ios == 0 {
			g.first = float64(s.Latency)
		}
		g.latIOs += float64(s.Latency) * n
		g.ios += n
		g.covered += dur
		g.spread.add(s.BusyDepth, s.IOPS, dur.Seconds())
	}
	if s.At.Sub(g.at) < c.opt.Window || g.covered < c.opt.Window/2 || g.ios <= 0 {
		return Decision{}, false
	}
	c.guard = nil
	after := g.latIOs / g.ios
	m := c.opt.Margin
	if after <= g.before*(1+m) {
		c.verdict = fmt.Sprintf("guard: kept the switch to %s: latency per I/O at busy depth %s %s before, %s after",
			g.to, fmtDepth(g.depth), fmtLatency(g.before), fmtLatency(after))
		return Decision{}, false
	}
	rise := fmt.Sprintf("latency per I/O at busy depth %s rose %.0f%% (%s to %s) after the switch to %s",
		fmtDepth(g.depth), (after/g.before-1)*100, fmtLatency(g.before), fmtLatency(after), g.to)
	if g.first <= g.before*(1+m) {
		c.verdict = fmt.Sprintf("guard: %s, but the first sample after it was at %s: the rise came later, not the switch's doing; kept",
			rise, fmtLatency(g.first))
		return Decision{}, false
	}
	if slope, ok := g.spread.ceiling(); ok {
		c.verdict = fmt.Sprintf("guard: %s, at a rate ceiling (IOPS flat, slope %.2f, over busy depths %s to %s): throughput-bound, not the switch's doing; kept",
			rise, slope, fmtDepth(g.spread.lo), fmtDepth(g.spread.hi))
		return Decision{}, false
	}
	until := s.At.Add(PinFor)
	reason := fmt.Sprintf("adapt: guard: %s; back to %s, pinned until %s", rise, g.from, until.UTC().Format(time.RFC3339))
	d := c.switchTo(s.At, g.from, reason)
	d.Revert, d.PinnedUntil = true, until
	c.pinnedUntil = until
	c.review = &review{blamed: g.to, back: g.from, at: s.At, depth: g.depth, bad: after}
	return d, true
}

// judgeReview adds s to an open review of the guard's switch back and,
// once the samples near the depth cover half a window (a whole window
// after the switch back, the sample spanning it left out), compares them
// with the latency that was blamed on the switch: not better by more than
// the margin, the switch back did not help, and the pin is lifted.
func (c *Controller) judgeReview(s Sample, dur time.Duration) (Decision, bool) {
	r := c.review
	if r == nil {
		return Decision{}, false
	}
	if s.At.Sub(r.at) >= day {
		c.review = nil
		return Decision{}, false
	}
	if !r.spanned || s.Switching {
		r.spanned = true
		return Decision{}, false
	}
	if !s.idle() && observe.Near(s.BusyDepth, r.depth, GuardFactor) {
		n := s.IOPS * dur.Seconds()
		r.latIOs += float64(s.Latency) * n
		r.ios += n
		r.covered += dur
	}
	if s.At.Sub(r.at) < c.opt.Window || r.covered < c.opt.Window/2 || r.ios <= 0 {
		return Decision{}, false
	}
	c.review = nil
	back := r.latIOs / r.ios
	if back*(1+c.opt.Margin) < r.bad {
		return Decision{}, false
	}
	reason := fmt.Sprintf("adapt: guard: review: latency per I/O at busy depth %s stayed at %s back on %s (%s on %s): the switch back did not help, the rise was not the switch's doing; pin lifted",
		fmtDepth(r.depth), fmtLatency(back), r.back, fmtLatency(r.bad), r.blamed)
	c.pinnedUntil = time.Time{}
	c.cleared.at, c.cleared.reason = s.At, reason
	return Decision{Unpin: true, From: c.current, To: c.current, Reason: reason}, true
}
