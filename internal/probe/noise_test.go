package probe

import (
	"math"
	"strings"
	"testing"
)

// roundsCand is a candidate with one deep-queue IOPS figure per round, rounds
// numbered from 1, and its median set.
func roundsCand(name string, iops ...float64) Candidate {
	c := Candidate{Scheduler: name}
	for i, v := range iops {
		c.Rounds = append(c.Rounds, RoundFigures{Round: i + 1, Figures: Figures{IOPS: v, QD1P99: 100}})
	}
	c.medians()
	return c
}

func decideNoisy(margin float64, cands []Candidate) (Decision, float64) {
	noise := setSpreads(ChooseIOPS, cands)
	return withinNoise(DecideFor(ChooseIOPS, margin, cands[0].Scheduler, true, cands), ChooseIOPS, margin, noise, cands[0].Scheduler, true, cands), noise
}

func TestWithinNoiseSaysNoDifference(t *testing.T) {
	t.Parallel()
	// A 3% gap, the rounds spreading by 10%: no difference above 10%.
	cands := []Candidate{roundsCand("mq-deadline", 1000, 1100, 1050), roundsCand("none", 1030, 1080, 1120)}
	d, noise := decideNoisy(0.05, cands)
	if !d.NoDifference || d.Winner != "mq-deadline" || !strings.Contains(d.Reason, "no difference above 10%: the current scheduler stays") {
		t.Fatalf("noise %.3f: got %+v", noise, d)
	}
	if cands[0].Spread < 0.09 || cands[0].Spread > 0.11 {
		t.Errorf("mq-deadline spread %.3f, want (1100-1000)/1050", cands[0].Spread)
	}
}

func TestWithinNoiseWinBelowSpreadDoesNotStand(t *testing.T) {
	t.Parallel()
	// none wins by the 5% margin in the median and two rounds of three,
	// but its rounds spread by 40%: the gain is noise.
	cands := []Candidate{roundsCand("mq-deadline", 1000, 1000, 1000), roundsCand("none", 800, 1100, 1200)}
	if d := DecideFor(ChooseIOPS, 0.05, "mq-deadline", true, cands); d.Winner != "none" {
		t.Fatalf("precondition: the plain decision should pick none, got %+v", d)
	}
	d, _ := decideNoisy(0.05, cands)
	if d.Winner != "mq-deadline" || !d.NoDifference {
		t.Fatalf("got %+v, want mq-deadline kept as no difference", d)
	}
}

func TestWithinNoiseRealWinStands(t *testing.T) {
	t.Parallel()
	cands := []Candidate{roundsCand("mq-deadline", 1000, 1020, 990), roundsCand("none", 1500, 1520, 1480)}
	d, _ := decideNoisy(0.05, cands)
	if d.Winner != "none" || d.NoDifference {
		t.Fatalf("got %+v, want none to win", d)
	}
	// A real loss is said as one, not as no difference.
	cands = []Candidate{roundsCand("mq-deadline", 1500, 1520, 1480), roundsCand("none", 1000, 1020, 990)}
	if d, _ := decideNoisy(0.05, cands); d.Winner != "mq-deadline" || d.NoDifference {
		t.Fatalf("got %+v, want mq-deadline kept for its lead", d)
	}
}

func TestDisturbance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cands []Candidate
		want  string // "" for undisturbed
	}{
		{"steady", []Candidate{roundsCand("a", 1000, 1050, 980), roundsCand("b", 1200, 1150, 1230)}, ""},
		{"noisy but no trend", []Candidate{roundsCand("a", 1000, 1800, 900), roundsCand("b", 1500, 900, 1600)}, ""},
		// Credits running out: both fall in every round.
		{"credits run out", []Candidate{roundsCand("a", 3000, 2000, 1300), roundsCand("b", 2900, 1900, 1400)}, "fell in every round"},
		{"cliff in round 2", []Candidate{roundsCand("a", 3000, 300, 310), roundsCand("b", 2900, 290, 300)}, "it fell 9.4x from round 2"},
		{"one outlier at the end", []Candidate{roundsCand("a", 3000, 3100), roundsCand("b", 2900, 300)}, ""},
		// A tail latency swinging between rounds is no rate change.
		{"p99 swings, IOPS steady", []Candidate{p99Swing(roundsCand("a", 1000, 1010, 990)), roundsCand("b", 1000, 990, 1010)}, ""},
		{"two rounds, moderate", []Candidate{roundsCand("a", 1000, 500), roundsCand("b", 900, 600)}, ""},
	} {
		got := disturbance(tc.cands)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: disturbance %q, want %q", tc.name, got, tc.want)
		}
	}
}

// p99Swing gives c's rounds depth-1 p99s a hundredfold apart.
func p99Swing(c Candidate) Candidate {
	for i := range c.Rounds {
		c.Rounds[i].QD1P99 = 30 * math.Pow(100, float64(i%2))
	}
	c.medians()
	return c
}
