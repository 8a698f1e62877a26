package probe

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func runsOf(n int64) Handoffs { return HandoffsOf(n) }

// A point's io-wq hand-offs are the median over its rounds, shown in the
// curve's text where there were any, and left out where a round could
// not count them.
func TestCurveHandoffs(t *testing.T) {
	t.Parallel()
	rounds := []RoundFigures{
		{Curve: []CurvePoint{{Depth: 1, IOPS: 1000, IOWorkerRuns: runsOf(0)}, {Depth: 32, IOPS: 9000, ObservedDepth: 9.8, IOWorkerRuns: runsOf(2000)}}},
		{Curve: []CurvePoint{{Depth: 1, IOPS: 1100, IOWorkerRuns: runsOf(0)}, {Depth: 32, IOPS: 9100, ObservedDepth: 9.8, IOWorkerRuns: runsOf(3000)}}},
		{Curve: []CurvePoint{{Depth: 1, IOPS: 1200, IOWorkerRuns: runsOf(1)}, {Depth: 32, IOPS: 9200, ObservedDepth: 9.8, IOWorkerRuns: runsOf(2600)}}},
	}
	c := medianCurve(rounds)
	if len(c) != 2 || c[0].IOWorkerRuns != runsOf(0) || c[1].IOWorkerRuns != runsOf(2600) {
		t.Fatalf("median curve %+v: want io-wq 0 at depth 1, 2600 at 32", c)
	}
	txt := CurveText(c)
	if !strings.Contains(txt, "32: 9.1K (9.80, io-wq 2600)") || strings.Contains(txt, "1: 1.1K (0.00, io-wq") {
		t.Errorf("curve text %q: want io-wq 2600 at depth 32 and none at depth 1", txt)
	}
	b, err := json.Marshal(c[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"io_worker_runs":2600`) {
		t.Errorf("JSON %s: want io_worker_runs 2600", b)
	}

	var back CurvePoint
	if err := json.Unmarshal(b, &back); err != nil || back != c[1] {
		t.Errorf("JSON %s read back as %+v (%v), want %+v", b, back, err, c[1])
	}

	rounds[1].Curve[1].IOWorkerRuns = Handoffs{}
	c = medianCurve(rounds)
	if c[1].IOWorkerRuns.Known {
		t.Errorf("a round without the count: got io-wq %d, want unknown", c[1].IOWorkerRuns.N)
	}
	if b, _ := json.Marshal(c[1]); strings.Contains(string(b), "io_worker_runs") {
		t.Errorf("JSON %s: an unknown count is left out", b)
	}
}

// A remembered result keeps whether the disk took NOWAIT reads, for
// advise, which opens no disk node to test it.
func TestRecordKeepsNoWait(t *testing.T) {
	t.Parallel()
	no := false
	rec := RecordOf(&Report{Device: "zram0", NoWait: &no}, time.Now())
	if rec.NoWait == nil || *rec.NoWait {
		t.Fatalf("record nowait %v, want false", rec.NoWait)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"nowait":false`) {
		t.Errorf("record JSON %s: want nowait false", b)
	}
}
