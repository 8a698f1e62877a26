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
// queue/scheduler), during a measurement, between two, or after the last.
// The probe must end with ErrSchedulerChanged and no result (figures
// measured under bfq are not a candidate's), leave the other's scheduler
// on the disk (not "restore" the original over it), drop its originals
// record and free the disk's lock. (Before, the figures were labelled with
// the candidate's name and bfq was reverted at the end.)
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
			orig := startFrom(t, live, l.Name)["scheduler"]
			_, offered, err := live.ReadScheduler(l.Name)
			if err != nil {
				t.Fatal(err)
			}
			admin := "bfq"
			if orig == "bfq" {
				admin = "kyber"
			}
			if !slices.Contains(offered, admin) {
				t.Fatalf("%s does not offer %s (%v): no third scheduler for the admin to set", l.Name, admin, offered)
			}
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
