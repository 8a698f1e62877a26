package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iosched/iosched/probe"
)

// The text report says who won and why, and shows every round's figures,
// the NOWAIT answer, punting, the restore and the write counters.
func TestRenderProbe(t *testing.T) {
	yes, no := true, false
	r := &probe.Report{
		Device: "loop7", Engine: probe.EngineIOUring, Depth: 32, BlockSize: 4096, DurationS: 1, Rounds: 2,
		Choose: probe.ChooseBalanced, Margin: 0.05, Original: "kyber", Incumbent: "none", Restored: true,
		NoWait: &yes, Punted: &no, ReadsBefore: 10, ReadsAfter: 990010, WritesBefore: 5, WritesAfter: 5,
		Candidates: []probe.Candidate{
			{Scheduler: "none", Figures: probe.Figures{IOPS: 143000, QD1P99: 51}, Rounds: []probe.RoundFigures{
				{Round: 1, Position: 1, Figures: probe.Figures{IOPS: 142000}}, {Round: 2, Position: 2, Figures: probe.Figures{IOPS: 144000}}}},
			{Scheduler: "mq-deadline", Figures: probe.Figures{IOPS: 111000, QD1P99: 50}, Rounds: []probe.RoundFigures{
				{Round: 1, Position: 2, Figures: probe.Figures{IOPS: 110000}}, {Round: 2, Position: 1, Figures: probe.Figures{IOPS: 112000}}}},
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
		"remembered as loop/loop/-/hwq1/qd128/1B/6.18",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
