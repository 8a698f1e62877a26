package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// A disk without NOWAIT is said plainly, with what io_uring does on it, in
// list, explain and advise; a disk with it gets no such line.
func TestNoWaitSaidPlainly(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	zram := &sysfs.Device{Name: "zram0", Class: sysfs.ClassZRAM, Driver: "zram", NoWait: &no, HWQueues: intp(0), BioBasedBy: "zram disks are bio-based"}
	loop := &sysfs.Device{Name: "loop7", Class: sysfs.ClassLoop, Driver: "loop", NoWait: &yes, HWQueues: intp(1)}
	want := "zram0: no NOWAIT: " + noWaitMeans

	var buf bytes.Buffer
	if err := renderList(&buf, []*sysfs.Device{zram, loop}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), want+"\n") || strings.Contains(buf.String(), "loop7: no NOWAIT") {
		t.Errorf("list:\n%s\nwant the line %q for zram0 only", buf.String(), want)
	}

	buf.Reset()
	renderExplain(&buf, pipeline.Assessment{Device: zram})
	if !strings.Contains(buf.String(), "nowait:      no: "+noWaitMeans) {
		t.Errorf("explain:\n%s\nwant nowait: no: %s", buf.String(), noWaitMeans)
	}

	want = "zram0: " + noWaitSlowPath
	buf.Reset()
	renderAdvice(&buf, time.Second, []adviceRow{{Name: "zram0", NoWait: &no, NoWaitNote: noWaitSlowPath, Basis: "idle: no basis"}, {Name: "loop7", NoWait: &yes, Basis: "idle: no basis"}})
	if !strings.Contains(buf.String(), want+"\n") || strings.Contains(buf.String(), "loop7: no NOWAIT") {
		t.Errorf("advise:\n%s\nwant the line %q for zram0 only", buf.String(), want)
	}
}

// advise shows the io-wq hand-offs the probe measured under the current
// scheduler at the point nearest the disk's busy depth.
func TestAdviseHandoffs(t *testing.T) {
	t.Parallel()
	n0, n1, n32, other := probe.HandoffsOf(0), probe.HandoffsOf(3), probe.HandoffsOf(2651), probe.HandoffsOf(9999)
	rec := &probe.Record{Figures: []probe.Candidate{
		{Scheduler: "mq-deadline", Curve: []probe.CurvePoint{
			{Depth: 1, ObservedDepth: 1, IOWorkerRuns: n0},
			{Depth: 4, ObservedDepth: 3.9, IOWorkerRuns: n1},
			{Depth: 32, ObservedDepth: 30, IOWorkerRuns: n32},
		}},
		{Scheduler: "none", Curve: []probe.CurvePoint{{Depth: 32, ObservedDepth: 30, IOWorkerRuns: other}}},
	}}
	r := adviceRow{Name: "loop7", Scheduler: "mq-deadline", Basis: "b"}
	r.handoffs(rec, "mq-deadline", 25)
	if r.IOWorkerRuns == nil || *r.IOWorkerRuns != 2651 || r.HandoffDepth != 32 {
		t.Fatalf("busy depth 25: got %v at depth %d, want 2651 at 32", r.IOWorkerRuns, r.HandoffDepth)
	}
	var buf bytes.Buffer
	renderAdvice(&buf, time.Second, []adviceRow{r})
	if !strings.Contains(buf.String(), "loop7: io_uring handed reads to io-wq workers in the probe at depth 32 under mq-deadline (2651 worker runs)") {
		t.Errorf("advise:\n%s\nwant the hand-offs at depth 32", buf.String())
	}

	r = adviceRow{Name: "loop7", Scheduler: "mq-deadline", Basis: "b"}
	r.handoffs(rec, "mq-deadline", 1)
	buf.Reset()
	renderAdvice(&buf, time.Second, []adviceRow{r})
	if r.IOWorkerRuns == nil || *r.IOWorkerRuns != 0 || strings.Contains(buf.String(), "io-wq") {
		t.Errorf("busy depth 1: got %v, output:\n%s\nwant 0 and no hand-off line", r.IOWorkerRuns, buf.String())
	}
}
