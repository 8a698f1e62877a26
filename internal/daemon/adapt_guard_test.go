package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/observe"
)

// TestAdaptGuardReviewLiftsThePin: on a fake disk whose IOPS fall tenfold
// at the very moment of a switch (credits that run out with it, under a
// load at one depth, which nothing tells from the switch's doing), the
// guard rail switches back and pins the disk; its review finds latency as
// bad back on the first scheduler and lifts the pin: the state file says
// so (guard_cleared, no pinned_until), adapt.json too, and the disk goes
// back to the curve's choice, where it stays.
func TestAdaptGuardReviewLiftsThePin(t *testing.T) {
	t.Parallel()
	const name = "loop20010"
	fs := fakeTree(t, name)
	load := startFakeLoad(t, fs, name, 1000)
	seeds := seedCrossing(t, fs, name, crossingFigures())
	pol := strings.Replace(adaptivePolicy(name, seeds, "100ms", "500ms", "", ""), "guard = false", "guard = true", 1)
	var mu sync.Mutex
	var switches []string
	r, _ := fakeDaemonWith(t, pol, func(c *Config) {
		c.FS = fs
		c.hooks.adaptSampled = func(n string, p observe.Point, dec adapt.Decision, sched string) {
			if n != name || !dec.Switch {
				return
			}
			if dec.To == "none" && !dec.Revert {
				load.setIOPS(100) // the cliff, with the switch
			}
			mu.Lock()
			switches = append(switches, dec.From+"->"+dec.To)
			mu.Unlock()
		}
	}, name)
	load.set(1)
	r.waitAttr(t, name, "scheduler", "mq-deadline")
	load.set(32)
	waitFor(t, 15*time.Second, "the pin lifted in the state file", func() bool {
		ds := r.state(t).Disks[name]
		return ds != nil && ds.Adapt != nil && ds.Adapt.GuardCleared != nil
	})
	a := r.state(t).Disks[name].Adapt
	if a.PinnedUntil != nil || !strings.Contains(a.GuardCleared.Reason, "the switch back did not help") {
		t.Errorf("adaptive state: pinned until %v, cleared %+v", a.PinnedUntil, a.GuardCleared)
	}
	var f adaptHistoryFile
	b, err := os.ReadFile(filepath.Join(r.stateDir, adaptHistoryName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if e := f.Disks[name]; e == nil || !e.PinnedUntil.IsZero() || !e.GuardCleared.Equal(a.GuardCleared.At) ||
		e.GuardClearedReason != a.GuardCleared.Reason || e.LastTo != "mq-deadline" {
		t.Errorf("adapt.json: %s", b)
	}
	// Unpinned, the window's agreement takes the disk back to none.
	r.waitAttr(t, name, "scheduler", "none")
	load.set(0)
	mu.Lock()
	defer mu.Unlock()
	if want := "none->mq-deadline mq-deadline->none none->mq-deadline mq-deadline->none"; strings.Join(switches, " ") != want {
		t.Errorf("switches %v, want %s", switches, want)
	}
}
