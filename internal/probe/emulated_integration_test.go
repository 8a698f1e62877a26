package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// TestIntegrationProbeBurstCreditsRunOut: on a burst-credit disk whose
// credits last about one round of the probe, the rounds disagree (the
// rate falls to the baseline mid-probe), and the result is marked
// disturbed, makes no decision (the incumbent stays, nothing applied, even
// with Apply), is restored, and is not reused by a lookup.
func TestIntegrationProbeBurstCreditsRunOut(t *testing.T) {
	p, err := diskemu.Lookup("burst")
	if err != nil {
		t.Fatal(err)
	}
	// Credits for about a round at the peak rate (two deep-queue
	// measurements, after sizing and warm-up): the peak bucket is the
	// first, the baseline with its credits the last.
	p.IOPS[len(p.IOPS)-1].Burst = 4000
	e := diskemu.Start(t, 7690, p, 64<<20)
	live := liveFS(t)
	orig := startFrom(t, live, e.Name)

	state := t.TempDir()
	store := OpenStore(state, nil)
	runner := &Runner{FS: live, StateDir: state, Locks: testLocks(t), Store: store, Progress: func(s string) { t.Log(s) }}
	o := Options{Options: probeopt.Options{Duration: 300 * time.Millisecond, Rounds: 3, Depth: 16, Depths: []int{1, 16},
		Engine: EngineIOUring, Candidates: []string{"none", "mq-deadline"}}, Apply: true}
	rep, err := runner.Probe(context.Background(), diskName(t, e.Name), o, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Disturbed, "the rate changed during the probe") {
		t.Fatalf("disturbed %q, want the rate change found from the rounds; reason %q", rep.Disturbed, rep.Reason)
	}
	if !strings.HasPrefix(rep.Reason, "no decision: ") || rep.Winner != rep.Incumbent {
		t.Errorf("decision %+v, want none made", rep.Decision)
	}
	if !rep.Restored || rep.Applied != "" {
		t.Errorf("restored %v, applied %q: want the original back and nothing applied", rep.Restored, rep.Applied)
	}
	cur, _, err := live.ReadScheduler(e.Name)
	if err != nil {
		t.Fatal(err)
	}
	if cur != orig["scheduler"] {
		t.Errorf("scheduler %s after the probe, want the original %s", cur, orig["scheduler"])
	}
	dev, err := live.Device(e.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runner.Lookup(dev, o, 0); err != nil || got != nil {
		t.Errorf("lookup of a disturbed result: %+v, %v; want none", got, err)
	}
}
