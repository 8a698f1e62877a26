package probe

import (
	"fmt"
	"math"
	"strings"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// What a probe optimises for.
const (
	// ChooseIOPS: a challenger must beat the incumbent's deep-queue IOPS
	// by more than the margin, in the median and in a majority of rounds.
	ChooseIOPS = probeopt.ChooseIOPS
	// ChooseLatency: the same on depth-1 p99 latency (lower wins).
	ChooseLatency = probeopt.ChooseLatency
	// ChooseBalanced: win on deep-queue IOPS as ChooseIOPS does, while
	// the median depth-1 p99 is no more than the margin worse: a gain at
	// depth 128 that costs latency at depth 1 is the regression that kept
	// virtio-blk's default from changing (the 2023 patch that would have
	// made none its default: +56% to +340% at depth 128, down to -13.9%
	// at depth 1).
	ChooseBalanced = probeopt.ChooseBalanced
)

// Decision is who won and why.
type Decision struct {
	Winner string `json:"winner"`
	// Reason says why, in a sentence, with the figures.
	Reason string `json:"reason"`
	// Provenance is the short form for logs and explain:
	// "probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%".
	Provenance string `json:"provenance"`
	// NoDifference: the candidates were within noise of each other
	// (the margin, or the rounds' spread if larger), so the incumbent
	// stays.
	NoDifference bool `json:"no_difference,omitempty"`
	// WinnerNr is the winner's nr_requests, as the disk took it, when
	// the probe measured nr_requests as a dimension (the kernel's
	// default for the scheduler included: a disk whose original value
	// differs gets it written); 0 without the dimension. It is written
	// after the scheduler, since the switch resets it.
	WinnerNr int `json:"winner_nr_requests,omitempty"`
	// Undecided: the figures decide nothing (a rate that moved during
	// the probe); Winner is only the scheduler the probe left in place,
	// which a caller must not apply.
	Undecided bool `json:"undecided,omitempty"`
}

// Decide picks the winner among cands. The incumbent stays unless a
// challenger wins by the rule of choose (see ChooseIOPS, ChooseLatency,
// ChooseBalanced) with margin (0.05 for 5%); among several challengers that
// win, the best by the chosen figure does. Rounds are compared by their
// Round number. incumbent and the decision's texts name candidates by
// Candidate.Name.
func Decide(choose string, margin float64, incumbent string, cands []Candidate) Decision {
	return DecideFor(choose, margin, incumbent, true, cands)
}

// DecideFor is Decide for an incumbent that is on the disk (onDisk), or is
// only the first candidate, the disk's scheduler being none of them: then
// it does not "stay" when no challenger beats it, as the disk never ran
// it; it is chosen as the first candidate, and the text says so.
func DecideFor(choose string, margin float64, incumbent string, onDisk bool, cands []Candidate) Decision {
	kept, stays := "kept", "stays"
	if !onDisk {
		kept, stays = "as the first candidate", "is chosen as the first candidate (the disk's scheduler is not one)"
	}
	var inc *Candidate
	for i := range cands {
		if cands[i].Name() == incumbent {
			inc = &cands[i]
		}
	}
	if inc == nil {
		return Decision{Winner: schedOf(incumbent), Reason: fmt.Sprintf("%s %s: it was not measured", incumbent, stays)}
	}
	var best *Candidate
	var bestWhy string
	var losers []string
	for i := range cands {
		c := &cands[i]
		if c == inc {
			continue
		}
		ok, why := beats(choose, margin, c, inc)
		if !ok {
			losers = append(losers, why)
			continue
		}
		if best == nil || better(choose, c, best) {
			best, bestWhy = c, why
		}
	}
	if best == nil {
		return Decision{
			Winner:     inc.Scheduler,
			WinnerNr:   inc.NrRequestsSet,
			Reason:     fmt.Sprintf("%s %s: %s", inc.Name(), stays, strings.Join(losers, "; ")),
			Provenance: "probe: " + compare(pickMain(cands, inc), inc) + ", " + inc.Name() + " " + kept,
		}
	}
	return Decision{
		Winner:     best.Scheduler,
		WinnerNr:   best.NrRequestsSet,
		Reason:     fmt.Sprintf("%s wins: %s", best.Name(), bestWhy),
		Provenance: "probe: " + compare(best, inc),
	}
}

// schedOf is the scheduler of a candidate's name.
func schedOf(name string) string {
	s, _, _ := strings.Cut(name, " ")
	return s
}

// pickMain is the challenger to show when none won: the one with the most
// deep-queue IOPS.
func pickMain(cands []Candidate, inc *Candidate) *Candidate {
	var c *Candidate
	for i := range cands {
		if &cands[i] != inc && (c == nil || cands[i].IOPS > c.IOPS) {
			c = &cands[i]
		}
	}
	if c == nil {
		return inc
	}
	return c
}

func better(choose string, a, b *Candidate) bool {
	if choose == ChooseLatency {
		return a.QD1P99 < b.QD1P99
	}
	return a.IOPS > b.IOPS
}

// beats reports whether c beats inc, and says why or why not.
func beats(choose string, margin float64, c, inc *Candidate) (bool, string) {
	pct := fmt.Sprintf("%g%%", margin*100)
	iopsGain := change(c.IOPS, inc.IOPS)
	p99Change := change(c.QD1P99, inc.QD1P99)
	switch choose {
	case ChooseLatency:
		won, n := roundsWon(c, inc, func(a, b *Figures) bool { return a.QD1P99 < b.QD1P99*(1-margin) })
		head := fmt.Sprintf("%s depth-1 p99 %s (%s vs %s)", c.Name(), signed(p99Change), us(c.QD1P99), us(inc.QD1P99))
		switch {
		case !(c.QD1P99 < inc.QD1P99*(1-margin)):
			return false, fmt.Sprintf("%s, not more than %s lower in the median", head, pct)
		case !majority(won, n):
			return false, fmt.Sprintf("%s in the median, but more than %s lower in only %d of %d rounds", head, pct, won, n)
		}
		return true, fmt.Sprintf("%s, more than %s lower in the median and in %d of %d rounds", head, pct, won, n)
	default:
		won, n := roundsWon(c, inc, func(a, b *Figures) bool { return a.IOPS > b.IOPS*(1+margin) })
		head := fmt.Sprintf("%s %s IOPS vs %s (%s)", c.Name(), kilo(c.IOPS), kilo(inc.IOPS), signed(iopsGain))
		switch {
		case !(c.IOPS > inc.IOPS*(1+margin)):
			return false, fmt.Sprintf("%s, not more than %s in the median", head, pct)
		case !majority(won, n):
			return false, fmt.Sprintf("%s in the median, but more than %s in only %d of %d rounds", head, pct, won, n)
		}
		why := fmt.Sprintf("%s, more than %s in the median and in %d of %d rounds", head, pct, won, n)
		if choose == ChooseBalanced {
			lat := fmt.Sprintf("depth-1 p99 %s (%s vs %s)", signed(p99Change), us(c.QD1P99), us(inc.QD1P99))
			if c.QD1P99 > inc.QD1P99*(1+margin) {
				return false, fmt.Sprintf("%s, but %s, worse by more than %s", why, lat, pct)
			}
			why += ", and " + lat + ", within " + pct
		}
		return true, why
	}
}

// roundsWon counts the rounds, paired by number, in which win(c, inc) holds.
func roundsWon(c, inc *Candidate, win func(a, b *Figures) bool) (won, n int) {
	for i := range c.Rounds {
		for j := range inc.Rounds {
			if c.Rounds[i].Round == inc.Rounds[j].Round {
				n++
				if win(&c.Rounds[i].Figures, &inc.Rounds[j].Figures) {
					won++
				}
			}
		}
	}
	return won, n
}

func majority(won, n int) bool { return n > 0 && 2*won > n }

// compare is "none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%".
func compare(c, inc *Candidate) string {
	return fmt.Sprintf("%s %s IOPS vs %s %s (%s), depth-1 p99 %s", c.Name(), kilo(c.IOPS), inc.Name(), kilo(inc.IOPS),
		signed(change(c.IOPS, inc.IOPS)), signed(change(c.QD1P99, inc.QD1P99)))
}

func change(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a/b - 1
}

func signed(f float64) string {
	p := math.Round(f * 100)
	if p == 0 {
		return "+0%" // no "-0%"
	}
	return fmt.Sprintf("%+.0f%%", p)
}

func kilo(iops float64) string {
	switch {
	case iops >= 10e6:
		return fmt.Sprintf("%.0fM", iops/1e6)
	case iops >= 1e6:
		return fmt.Sprintf("%.2fM", iops/1e6)
	case iops >= 10e3:
		return fmt.Sprintf("%.0fK", iops/1e3)
	case iops >= 1e3:
		return fmt.Sprintf("%.1fK", iops/1e3)
	}
	return fmt.Sprintf("%.0f", iops)
}

func us(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f µs", v)
}
