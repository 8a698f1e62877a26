package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// TestIntegrationSchedulerChangedUnderTheProbe: someone else switches the
// disk's scheduler while it is probed (an admin's echo bfq >
// queue/scheduler, or another scheduler the disk offers that is not a
// candidate), during a measurement, between two, or after the last.
// The probe must end with ErrSchedulerChanged and no result (figures
// measured under the admin's scheduler are not a candidate's), leave the
// other's scheduler on the disk (not "restore" the original over it), drop
// its originals record and free the disk's lock. (Before, the figures were
// labelled with the candidate's name and the admin's scheduler was
// reverted at the end.)
func TestIntegrationSchedulerChangedUnderTheProbe(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	for i, tc := range []struct {
		name string
		// during: change the scheduler from a goroutine while the
		// first candidate's reads are in flight; else from the
		// progress callback (the probe's goroutine, so never beside
		// one of its switches), at the nth "round" line.
		during bool
		nth    int
	}{
		{name: "during a measurement", during: true},
		{name: "between measurements", nth: 1},
		{name: "after the last measurement", nth: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := looptest.Add(t, 7340+i)
			l.Bind(t, 64<<20)
			orig, admin := startAndAdmin(t, live, l.Name)
			set := func() {
				if err := live.WriteQueueAttr(l.Name, "scheduler", admin); err != nil {
					t.Error(err)
				}
			}
			state := t.TempDir()
			locks := testLocks(t)
			o := Options{Options: probeopt.Options{Duration: 60 * time.Millisecond, Rounds: 1, Depth: 8, Engine: EngineIOUring}}
			rounds := 0
			progress := func(s string) {
				t.Log(s)
				if strings.HasPrefix(s, "round") {
					if rounds++; rounds == tc.nth {
						set()
					}
				}
			}
			changed := make(chan struct{})
			if tc.during {
				o.Duration = time.Second
				go func() {
					defer close(changed)
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
						// A candidate shown and reads in flight: the
						// probe measures, its next switch is most of
						// a second away.
						cur, _ := live.ReadQueueAttr(l.Name, "scheduler")
						if cur != orig && readsInFlight(t, live, l.Name) > 0 {
							set()
							return
						}
					}
					t.Error("never saw the probe measuring a candidate")
				}()
			} else {
				close(changed)
			}
			rep, err := Run(context.Background(), Target{FS: live, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, progress)
			<-changed
			t.Log(err)
			if !errors.Is(err, ErrSchedulerChanged) {
				t.Fatalf("err = %v, want ErrSchedulerChanged", err)
			}
			if rep != nil && (rep.Winner != "" || rep.Restored || rep.Applied != "") {
				t.Errorf("a result from a probe whose disk changed scheduler: winner %q restored %v applied %q", rep.Winner, rep.Restored, rep.Applied)
			}
			if !strings.Contains(err.Error(), admin) {
				t.Errorf("the error does not name the scheduler found (%s): %v", admin, err)
			}
			if cur, _ := live.ReadQueueAttr(l.Name, "scheduler"); cur != admin {
				t.Errorf("scheduler %s after the probe: the other's %s was not left alone", cur, admin)
			}
			if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the originals record stays (a later start would put %s back over %s): %v", orig, admin, err)
			}
			if locks.Held(l.Name) {
				t.Error("the disk's lock is still held")
			}
		})
	}
}

// startAndAdmin sets the disk's start scheduler and returns it with the
// one the admin sets during the probe: offered, not the start, and not one
// of the probe's candidates (figures measured under a candidate could pass
// for its own). The start is a non-candidate (startFrom) when the disk
// offers two; when it offers one, the start is a candidate so that the
// one is left for the admin. A disk that offers no non-candidate fails
// the test: it cannot tell the admin's change from the probe's switches.
func startAndAdmin(t *testing.T, fs sysfs.FS, name string) (start, admin string) {
	t.Helper()
	_, offered, err := fs.ReadScheduler(name)
	if err != nil {
		t.Fatal(err)
	}
	cands := probeopt.Default().Candidates
	var others, offeredCands []string
	for _, s := range offered {
		if slices.Contains(cands, s) {
			offeredCands = append(offeredCands, s)
		} else {
			others = append(others, s)
		}
	}
	switch {
	case len(others) >= 2:
		start = startFrom(t, fs, name)["scheduler"]
		for _, s := range others {
			if s != start {
				return start, s
			}
		}
		t.Fatalf("%s: startFrom set %s, and no other non-candidate of %v is left for the admin", name, start, others)
	case len(others) == 1 && len(offeredCands) > 0:
		// The last candidate: the probe's first switch, to the first,
		// changes the scheduler, which the "during" case waits for.
		start = offeredCands[len(offeredCands)-1]
		if err := fs.WriteQueueAttr(name, "scheduler", start); err != nil {
			t.Fatal(err)
		}
		return start, others[0]
	}
	t.Fatalf("%s offers %v, and the probe's candidates are %v: no scheduler outside the candidates for the admin to set, so the test cannot tell the admin's change from the probe's own switches", name, offered, cands)
	return "", ""
}

// readsInFlight is the disk's reads in flight now (its inflight file).
func readsInFlight(t *testing.T, fs sysfs.FS, name string) int {
	b, err := os.ReadFile(filepath.Join(fs.Root(), "block", name, "inflight"))
	if err != nil {
		t.Error(err)
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 || f[0] == "0" {
		return 0
	}
	return 1
}
