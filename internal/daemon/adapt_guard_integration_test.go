package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loops 7580-7599: the adaptive guard rail on emulated disks.
const guardLoops = 7580

// regressionProfile is a disk on which none makes latency worse, whatever
// the curves say: 10 ms reads, 8 in service, no limit (so that every read
// the scheduler slows shows), and 10 ms more a read while the loop runs
// none. At depth 32 mq-deadline gives about 800 IOPS at 40 ms a read,
// none about 400 at 80 ms.
func regressionProfile() diskemu.Profile {
	return diskemu.Profile{
		Name:     "regression",
		About:    "10 ms reads, 8 in service, no limits; none adds 10 ms a read",
		Service:  diskemu.Dist{Kind: "lognormal", Mean: 10 * time.Millisecond, Spread: 3 * time.Millisecond},
		Parallel: 8,
		Overhead: map[string]time.Duration{"none": 10 * time.Millisecond},
	}
}

// TestIntegrationAdaptGuardReverts: on an emulated disk behind a real loop
// where none adds 10 ms to every read, with seeded curves that favour
// mq-deadline at depth 1 and none from depth 8, the daemon with the guard
// rail switches to mq-deadline under a depth-1 load (the guard keeps it:
// latency fell), then to none under a depth-32 load, where latency per
// I/O doubles: a window later the guard switches back to mq-deadline and
// pins the disk. The load goes on at depth 32 for two windows more (the
// curves favour none all along; the review finds latency back as it was
// before and keeps the pin): no other switch. A poller reading
// queue/scheduler counts exactly three changes; the state file and
// adapt.json show the pin.
func TestIntegrationAdaptGuardReverts(t *testing.T) {
	requireLoops(t)
	p := regressionProfile()
	e := diskemu.Start(t, guardLoops, p, 1<<30)
	name := e.Name
	setScheduler(t, name, "none")
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	seeds := seedCrossing(t, fs, name, modelCrossing(p))
	writes := countSchedulerWrites(t, name)
	log := &sampleLog{name: name}
	log.enter("start", 0)
	stateDir := t.TempDir()
	r := start(t, emuGuardPolicy(name, seeds), withStateDir(stateDir), func(c *Config) { c.hooks.adaptSampled = log.hook })
	waitFor(t, 10*time.Second, "the seeded decision on the disk, followed", func() bool {
		return activeScheduler(t, name) == "none" && len(log.of("start")) > 0
	})
	phase := func(name string) []sampled { return switchesOf(log.of(name)) }

	log.enter("depth 1", 1)
	rd := startReader(t, name, 1)
	waitFor(t, 3*phasedWindow+5*time.Second, "the switch to mq-deadline at depth 1", func() bool { return len(phase("depth 1")) > 0 })
	sw := phase("depth 1")[0]
	// A window and two samples: the guard's verdict on it.
	var verdict string
	waitFor(t, phasedWindow+10*phasedSample, "the guard's verdict on the switch to mq-deadline", func() bool {
		st := r.diskState(t, name)
		if st != nil && st.Adapt != nil {
			verdict = st.Adapt.GuardVerdict
		}
		return verdict != ""
	})
	rd.stop(t)
	if !strings.HasPrefix(verdict, "guard: kept the switch to mq-deadline") {
		for _, s := range log.of("depth 1") {
			t.Logf("depth 1: %s busy depth %.1f IOPS %.0f latency %.0fus %s", s.at.Format("05.000"), s.point.BusyDepth, s.point.IOPS(), s.point.LatencyUs, s.scheduler)
		}
		t.Errorf("the guard's verdict on the switch to mq-deadline: %q", verdict)
	}
	if sw.dec.To != "mq-deadline" || len(phase("depth 1")) != 1 {
		t.Fatalf("depth 1: switches %+v", phase("depth 1"))
	}

	log.enter("depth 32", 32)
	rd = startReader(t, name, 32)
	waitFor(t, 3*phasedWindow+5*time.Second, "the switch to none at depth 32", func() bool { return len(phase("depth 32")) > 0 })
	waitFor(t, phasedWindow+10*phasedSample, "the guard's switch back", func() bool { return len(phase("depth 32")) > 1 })
	revert := phase("depth 32")[1]
	// Two windows more under the load: the review, and the pin holding.
	waitFor(t, 2*phasedWindow+10*phasedSample, "two windows of samples after the switch back", func() bool {
		n := 0
		for _, s := range log.of("depth 32") {
			if s.at.After(revert.at) {
				n++
			}
		}
		return n >= 2*int(phasedWindow/phasedSample)+2
	})
	// The window still agrees on none, held by the pin.
	waitFor(t, 5*time.Second, "a switch to none held by the pin in the state file", func() bool {
		st := r.diskState(t, name)
		return st != nil && st.Adapt != nil && st.Adapt.Agreeing == "none" && strings.HasPrefix(st.Adapt.Held, "pinned by the guard rail until")
	})
	rd.stop(t)
	log.enter("after", 0)

	var got []string
	for _, s := range append(phase("depth 32"), phase("after")...) {
		got = append(got, s.dec.From+"->"+s.dec.To)
	}
	if strings.Join(got, " ") != "mq-deadline->none none->mq-deadline" || !revert.dec.Revert ||
		!strings.HasPrefix(revert.dec.Reason, "adapt: guard: latency per I/O at busy depth ") ||
		!strings.Contains(revert.dec.Reason, "after the switch to none; back to mq-deadline, pinned until") {
		for _, s := range log.of("depth 32") {
			t.Logf("depth 32: %s busy depth %.1f IOPS %.0f latency %.0fus %s", s.at.Format("05.000"), s.point.BusyDepth, s.point.IOPS(), s.point.LatencyUs, s.scheduler)
		}
		t.Fatalf("depth 32: switches %v, want mq-deadline->none none->mq-deadline (the guard's: %q)", got, revert.dec.Reason)
	}
	t.Logf("the guard: %s", revert.dec.Reason)
	if n := writes.n.Load(); n != 3 {
		t.Errorf("%d scheduler changes on the disk, want 3", n)
	}
	if s := activeScheduler(t, name); s != "mq-deadline" {
		t.Errorf("scheduler at the end %s, want mq-deadline", s)
	}
	st := r.diskState(t, name)
	if st == nil || st.Adapt == nil {
		t.Fatalf("no adaptive state: %+v", st)
	}
	a := st.Adapt
	if a.PinnedUntil == nil || a.PinnedUntil.Before(time.Now().Add(23*time.Hour)) || a.GuardCleared != nil ||
		a.LastSwitch == nil || a.LastSwitch.To != "mq-deadline" || a.LastSwitch.Reason != revert.dec.Reason || a.SwitchesToday != 3 {
		t.Errorf("adaptive state at the end: %+v (last switch %+v)", a, a.LastSwitch)
	}
	b, err := os.ReadFile(filepath.Join(stateDir, adaptHistoryName))
	if err != nil {
		t.Fatal(err)
	}
	var f adaptHistoryFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if h := f.Disks[name]; h == nil || !h.PinnedUntil.Equal(*a.PinnedUntil) || h.LastTo != "mq-deadline" || len(h.Switches) != 3 {
		t.Errorf("adapt.json: %s", b)
	}
}
