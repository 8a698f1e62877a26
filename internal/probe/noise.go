package probe

import (
	"fmt"
	"math"
	"slices"
)

// How far a probe's rounds may disagree before its figures stop meaning
// anything about the schedulers.
const (
	// disturbStep: the deep-queue measurements, in the order they ran,
	// split into an earlier and a later part of at least two each, where
	// every one of one part is more than this many times every one of
	// the other: the rate stepped (a burst allowance running out,
	// another tenant arriving or leaving) rather than wandered. One
	// outlying measurement is a busy machine's noise and is not enough.
	disturbStep = 2.0
	// disturbTrend: with three rounds or more, a level that falls (or
	// rises) in every round, by more than this part from the first round
	// to the last, is a rate that changed during the probe (wide, as a
	// busy machine's noise makes three rounds monotone one time in three). Rounds
	// alternate the candidates' order, so a scheduler's own effect
	// cannot make every candidate move the same way round after round.
	disturbTrend = 0.5
)

// figureOf is the figure choose compares: deep-queue IOPS, or depth-1 p99.
func figureOf(choose string, f *Figures) float64 {
	if choose == ChooseLatency {
		return f.QD1P99
	}
	return f.IOPS
}

// spreadOf is how far c's rounds disagree on the figure choose compares:
// (max - min) / median, 0 with fewer than two rounds.
func spreadOf(choose string, c *Candidate) float64 {
	if len(c.Rounds) < 2 {
		return 0
	}
	vs := make([]float64, len(c.Rounds))
	for i := range c.Rounds {
		vs[i] = figureOf(choose, &c.Rounds[i].Figures)
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	if med <= 0 {
		return 0
	}
	return (vs[len(vs)-1] - vs[0]) / med
}

// setSpreads fills every candidate's Spread and returns the largest.
func setSpreads(choose string, cands []Candidate) float64 {
	var noise float64
	for i := range cands {
		cands[i].Spread = spreadOf(choose, &cands[i])
		noise = max(noise, cands[i].Spread)
	}
	return noise
}

// disturbance says why the rounds disagree too much for a decision, "" when
// they agree: a step in the rate between measurements (disturbStep), or a
// level (each round's figures relative to their
// candidate's median, averaged over the candidates) that moves the same
// way in every round by more than disturbTrend in all. It looks at the
// rate (deep-queue IOPS) whatever the probe optimises for: a tail latency
// such as depth-1 p99 swings by many times between rounds on a busy
// machine with no change in what the disk can do.
func disturbance(cands []Candidate) string {
	const choose = ChooseIOPS
	if why := step(cands); why != "" {
		return why
	}
	// level[r] is round r's mean of figure/median over the candidates.
	sum, n := map[int]float64{}, map[int]int{}
	for i := range cands {
		med := figureOf(choose, &cands[i].Figures)
		if med <= 0 {
			continue
		}
		for j := range cands[i].Rounds {
			r := cands[i].Rounds[j].Round
			sum[r] += figureOf(choose, &cands[i].Rounds[j].Figures) / med
			n[r]++
		}
	}
	rounds := make([]int, 0, len(sum))
	for r := range sum {
		rounds = append(rounds, r)
	}
	slices.Sort(rounds)
	if len(rounds) < 3 {
		return ""
	}
	level := make([]float64, len(rounds))
	for i, r := range rounds {
		level[i] = sum[r] / float64(n[r])
	}
	up, down := true, true
	for i := 1; i < len(level); i++ {
		up = up && level[i] > level[i-1]
		down = down && level[i] < level[i-1]
	}
	first, last := level[0], level[len(level)-1]
	if (up || down) && first > 0 && math.Abs(last/first-1) > disturbTrend {
		what := "fell"
		if up {
			what = "rose"
		}
		return fmt.Sprintf("the rate changed during the probe: it %s in every round, by %.0f%% from round %d to round %d (more than %.0f%%)",
			what, math.Abs(last/first-1)*100, rounds[0], rounds[len(rounds)-1], disturbTrend*100)
	}
	return ""
}

// withinNoise turns a decision for a challenger whose median gain over the
// incumbent is no larger than the spread of either's rounds into the
// incumbent staying, and a decision where no challenger won while every
// challenger's median is within max(margin, noise) of the incumbent's into
// the plain "no difference above N%" verdict. noise is the largest spread.
func withinNoise(d Decision, choose string, margin, noise float64, incumbent string, onDisk bool, cands []Candidate) Decision {
	var inc *Candidate
	for i := range cands {
		if cands[i].Name() == incumbent {
			inc = &cands[i]
		}
	}
	if inc == nil {
		return d
	}
	won := func(c *Candidate) bool { return c.Scheduler == d.Winner && c.NrRequestsSet == d.WinnerNr }
	limit := max(margin, noise)
	for i := range cands {
		c := &cands[i]
		if c == inc {
			continue
		}
		gain := math.Abs(change(figureOf(choose, &c.Figures), figureOf(choose, &inc.Figures)))
		if won(c) && gain > max(c.Spread, inc.Spread) {
			return d // a win larger than either's spread stands
		}
		if gain > limit && !won(c) {
			return d // a real difference, a loss: the reason says it
		}
	}
	stays := "the current scheduler stays"
	if !onDisk {
		stays = incumbent + " is chosen as the first candidate (the disk's scheduler is not one)"
	}
	return Decision{
		Winner:   inc.Scheduler,
		WinnerNr: inc.NrRequestsSet,
		Reason: fmt.Sprintf("no difference above %.0f%%: %s (the rounds' spread is %.0f%%, the margin %.0f%%)",
			limit*100, stays, noise*100, margin*100),
		Provenance:   fmt.Sprintf("probe: no difference above %.0f%% (spread %.0f%%), %s kept", limit*100, noise*100, incumbent),
		NoDifference: true,
	}
}

// step finds a step in the deep-queue IOPS over the measurements in the
// order they ran (round, then position): see disturbStep.
func step(cands []Candidate) string {
	type m struct {
		round, pos int
		iops       float64
		sched      string
	}
	var ms []m
	for i := range cands {
		for _, r := range cands[i].Rounds {
			ms = append(ms, m{r.Round, r.Position, r.IOPS, cands[i].Name()})
		}
	}
	slices.SortFunc(ms, func(a, b m) int {
		if a.round != b.round {
			return a.round - b.round
		}
		return a.pos - b.pos
	})
	for k := 2; k <= len(ms)-2; k++ {
		bLo, bHi, aLo, aHi := math.Inf(1), 0.0, math.Inf(1), 0.0
		for _, x := range ms[:k] {
			bLo, bHi = min(bLo, x.iops), max(bHi, x.iops)
		}
		for _, x := range ms[k:] {
			aLo, aHi = min(aLo, x.iops), max(aHi, x.iops)
		}
		what, ratio := "", 0.0
		switch {
		case aHi > 0 && bLo > disturbStep*aHi:
			what, ratio = "fell", bLo/aHi
		case bHi > 0 && aLo > disturbStep*bHi:
			what, ratio = "rose", aLo/bHi
		default:
			continue
		}
		return fmt.Sprintf("the rate changed during the probe: it %s %.1fx from round %d (%s) on, every measurement before and after (more than %gx)",
			what, ratio, ms[k].round, ms[k].sched, disturbStep)
	}
	return ""
}
