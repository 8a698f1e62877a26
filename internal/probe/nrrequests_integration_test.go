package probe

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// TestIntegrationProbeNrRequests probes a loop running mq-deadline with
// nr_requests 6 (no candidate: the incumbent is mq-deadline with the first
// of them) over none and mq-deadline, each with 4,
// the kernel's default and 512: each candidate's nr_requests is the value
// the disk took, read back (the default is the scheduler's after a
// switch, and none holds 512 to the hardware's tags); the scheduler and
// nr_requests are back after the probe, and so are the hardware tags in
// use, which none's pool of 4 shrank and no switch grows back: under
// none afterwards, reads at depth 32 are handed to io-wq ten times less
// often than with a pool of 4. With Apply the disk keeps the winner's
// scheduler and its nr_requests, written after it.
func TestIntegrationProbeNrRequests(t *testing.T) {
	looptest.Require(t)
	fs := liveFS(t)
	l := looptest.Add(t, 7700)
	l.Bind(t, 64<<20)
	set := func(attr, v string) {
		t.Helper()
		if err := fs.WriteQueueAttr(l.Name, attr, v); err != nil {
			t.Fatal(err)
		}
	}
	read := func(attr string) string {
		t.Helper()
		v, err := fs.ReadQueueAttr(l.Name, attr)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(v)
	}
	set("scheduler", "mq-deadline")
	set("nr_requests", "6")
	tags := readTags(t, l.Name)
	state := t.TempDir()
	locks := testLocks(t)
	o := quick()
	o.Candidates, o.NrRequests = []string{"none", "mq-deadline"}, []int{4, probeopt.NrRequestsDefault, 512}
	o.Depths = []int{1, 16}

	rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"none nr_requests 4":              4,
		"mq-deadline nr_requests 4":       4,
		"none nr_requests default":        tags,
		"none nr_requests 512":            tags,
		"mq-deadline nr_requests default": 2 * min(tags, 128),
		"mq-deadline nr_requests 512":     512,
	}
	if len(rep.Candidates) != len(want) {
		t.Fatalf("%d candidates, want %d", len(rep.Candidates), len(want))
	}
	for _, c := range rep.Candidates {
		if w, ok := want[c.Name()]; !ok || c.NrRequestsSet != w || len(c.Rounds) != o.Rounds || c.IOPS <= 0 {
			t.Errorf("%s: nr_requests set %d (want %d), %d rounds, %.0f IOPS", c.Name(), c.NrRequestsSet, w, len(c.Rounds), c.IOPS)
		}
	}
	if rep.OriginalNr != 6 || rep.Incumbent != "mq-deadline nr_requests 4" || !rep.Restored {
		t.Errorf("original nr_requests %d, incumbent %q, restored %v; want 6, the first candidate of the disk's scheduler, restored", rep.OriginalNr, rep.Incumbent, rep.Restored)
	}
	if s, nr := read("scheduler"), read("nr_requests"); s != "mq-deadline" || nr != "6" {
		t.Errorf("after the probe: scheduler %s, nr_requests %s; want mq-deadline and 6 back", s, nr)
	}
	if rep.WinnerNr <= 0 {
		t.Errorf("decision %+v: no nr_requests for the winner", rep.Decision)
	}
	set("scheduler", "none")
	full := handoffRun(t, l.Name, 32, 64<<20, 300*time.Millisecond)
	set("nr_requests", "4")
	few := handoffRun(t, l.Name, 32, 64<<20, 300*time.Millisecond)
	if few.WorkerRuns == 0 || full.WorkerRuns*10 > few.WorkerRuns {
		t.Errorf("under none at depth 32 after the probe: %d io-wq worker runs, %d with a pool of 4: want ten times fewer (the tags grown back)",
			full.WorkerRuns, few.WorkerRuns)
	}
	set("nr_requests", strconv.Itoa(tags))
	set("scheduler", "mq-deadline")
	set("nr_requests", "6")

	o.Apply = true
	rep, err = Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	if s, nr := read("scheduler"), read("nr_requests"); rep.Applied != rep.Winner || s != rep.Winner || nr != strconv.Itoa(rep.WinnerNr) {
		t.Errorf("applied %q: scheduler %s, nr_requests %s; want the winner %s with %d", rep.Applied, s, nr, rep.Winner, rep.WinnerNr)
	}
}
