package daemon

import (
	"reflect"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/metrics"
	"github.com/iosched/iosched/internal/probe"
)

// A decision's curves reach the metrics with the key they are of, where
// they came from and when they were measured: now for a probe just run, the record's time
// for a remembered or seeded one.
func TestProbeCurvesOfDecision(t *testing.T) {
	t.Parallel()
	now, then := time.Unix(2000, 0), time.Unix(1000, 0)
	cands := []probe.Candidate{
		{Scheduler: "none", Curve: []probe.CurvePoint{{Depth: 1, IOPS: 10}, {Depth: 8, IOPS: 80}}},
		{Scheduler: "mq-deadline", Curve: []probe.CurvePoint{{Depth: 1, IOPS: 12}, {Depth: 8, IOPS: 60}}},
	}
	curves := map[string][]metrics.CurvePoint{
		"none":        {{Depth: 1, IOPS: 10}, {Depth: 8, IOPS: 80}},
		"mq-deadline": {{Depth: 1, IOPS: 12}, {Depth: 8, IOPS: 60}},
	}
	key := probe.Key{Class: "virtio", Driver: "virtio_blk", HWQueues: 2, QueueDepth: 256, SizeBytes: 1 << 30, Kernel: "6.1.0"}
	for _, c := range []struct {
		rep         probe.Report
		key, source string
		at          time.Time
	}{
		{probe.Report{Candidates: cands, Depth: 8, Key: key}, key.String(), "probed", now},
		{probe.Report{Candidates: cands, Depth: 8}, "", "probed", now},
		{probe.Report{Candidates: cands, Depth: 8, Key: key, From: "remembered 1970-01-01T00:16:40Z", MeasuredAt: then}, key.String(), "remembered", then},
		{probe.Report{Candidates: cands, Depth: 8, Key: key, From: "seeded from /etc/iosched/fleet.json", MeasuredAt: then}, key.String(), "seeded", then},
	} {
		got := probeCurves(&c.rep, now)
		want := metrics.ProbeCurves{Key: c.key, Source: c.source, At: c.at, Curves: curves}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("from %q:\n got %+v\nwant %+v", c.rep.From, got, want)
		}
	}
}
