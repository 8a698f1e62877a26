package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/probe"
)

// The text report says who won and why, and shows every round's figures,
// the NOWAIT answer, punting, the restore and the write counters.
func TestRenderProbe(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	r := &probe.Report{
		Device: "loop7", Engine: probe.EngineIOUring, Depth: 32, Depths: []int{1, 4, 16}, BlockSize: 4096, DurationS: 1, Rounds: 2,
		Choose: probe.ChooseBalanced, Margin: 0.05, Original: "kyber", Incumbent: "none", Restored: true,
		NoWait: &yes, Punted: &no, ReadsBefore: 10, ReadsAfter: 990010, WritesBefore: 5, WritesAfter: 5,
		Candidates: []probe.Candidate{
			{Scheduler: "none", Figures: probe.Figures{IOPS: 143000, QD1P99: 51}, Rounds: []probe.RoundFigures{
				{Round: 1, Position: 1, Figures: probe.Figures{IOPS: 142000}}, {Round: 2, Position: 2, Figures: probe.Figures{IOPS: 144000}}}, Spread: 0.014,
				Curve: []probe.CurvePoint{{Depth: 1, ObservedDepth: 0.62, IOPS: 45100}, {Depth: 4, ObservedDepth: 1.81, IOPS: 121000}, {Depth: 16, ObservedDepth: 2.1, IOPS: 150000}}},
			{Scheduler: "mq-deadline", Figures: probe.Figures{IOPS: 111000, QD1P99: 50}, Rounds: []probe.RoundFigures{
				{Round: 1, Position: 2, Figures: probe.Figures{IOPS: 110000}}, {Round: 2, Position: 1, Figures: probe.Figures{IOPS: 112000}}}, Spread: 0.018,
				Curve: []probe.CurvePoint{{Depth: 1, ObservedDepth: 0.6, IOPS: 44000}, {Depth: 4, ObservedDepth: 1.9, IOPS: 99000}, {Depth: 16, ObservedDepth: 2.25, IOPS: 111000}}},
		},
		Decision:     probe.Decision{Winner: "none", Reason: "none stays: mq-deadline 111K IOPS vs 143K (-22%), not more than 5% in the median"},
		RememberedAs: "loop/loop/-/hwq1/qd128/1B/6.18",
	}
	var b bytes.Buffer
	renderProbe(&b, r)
	out := b.String()
	for _, want := range []string{
		"loop7: none stays: mq-deadline 111K IOPS vs 143K (-22%)",
		"NOWAIT: yes; io_uring punting: none seen",
		"none *", "142000", "144000", "110000", "112000", "round 1 (1st)", "round 2 (2nd)",
		"original settings restored (scheduler kyber)",
		"writes 5 -> 5 (no writes)",
		"spread of the rounds ((max-min)/median of the figure compared): none 1%, mq-deadline 2%",
		"remembered as loop/loop/-/hwq1/qd128/1B/6.18",
		"curve: IOPS at each depth (in brackets, the disk's mean requests in flight)",
		"io_uring, depth 1 and 32, curve at depths 1, 4, 16, 4096-byte random reads",
		"  none *         1: 45K (0.62)  4: 121K (1.81)  16: 150K (2.10)\n",
		"  mq-deadline    1: 44K (0.60)  4: 99K (1.90)  16: 111K (2.25)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// A result from before curves shows no curve line.
func TestRenderProbeWithoutCurve(t *testing.T) {
	t.Parallel()
	r := &probe.Report{Device: "vdb", Engine: probe.EngineIOUring, Depth: 32, From: "remembered 2026-11-30T12:00:00Z",
		Candidates: []probe.Candidate{{Scheduler: "none", Figures: probe.Figures{IOPS: 1}}, {Scheduler: "mq-deadline"}},
		Decision:   probe.Decision{Winner: "none", Reason: "none wins"}}
	var b bytes.Buffer
	renderProbe(&b, r)
	if strings.Contains(b.String(), "curve") {
		t.Errorf("a result without curves shows one:\n%s", b.String())
	}
}
