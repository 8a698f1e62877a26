package probe

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
)

// TestIntegrationStuckDisk: the disk stops answering in the middle of a
// probe. The engine gives up on its reads, and the restore, a scheduler
// switch that waits for those reads, is left to finish in the background:
// the probe ends with ErrRestorePending within a second of its budget, the
// disk stays locked and its originals recorded meanwhile. When the disk
// answers again the originals come back, the record goes and the lock is
// free. (Before, the probe waited in its restore for as long as the disk
// did not answer.)
func TestIntegrationStuckDisk(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	l, g := looptest.AddGated(t, 7304, 64<<20)
	orig := startFrom(t, live, l.Name)
	state := t.TempDir()

	o := Options{Duration: 200 * time.Millisecond, Rounds: 1, Depth: 8, Engine: EngineIOUring, Force: true}
	start := time.Now()
	type result struct {
		rep *Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		rep, err := Run(context.Background(), Target{FS: live, StateDir: state, Name: l.Name}, o, func(s string) {
			t.Log(s)
			if len(s) > 5 && s[:5] == "round" {
				g.Set(true) // the first candidate is measured: the disk stops answering
			}
		})
		ran <- result{rep, err}
	}()
	var rep *Report
	var err error
	select {
	case r := <-ran:
		rep, err = r.rep, r.err
	case <-time.After(10 * time.Second):
		g.Set(false)
		<-ran
		t.Fatal("the probe was still running 10 s after it started, on a disk that stopped answering (its budget is under 2 s)")
	}
	took := time.Since(start)
	if !errors.Is(err, ErrRestorePending) {
		t.Fatalf("probe of a disk that stopped answering: err = %v, want ErrRestorePending", err)
	}
	t.Log(err)
	if rep == nil || took > time.Duration(rep.BudgetS*float64(time.Second))+time.Second {
		t.Errorf("took %s: budget %v + 1s", took, rep)
	}
	if g.Waiting() == 0 {
		t.Error("no read is waiting at the gate: the disk never stopped answering")
	}
	if lockFree(state, l.Name) {
		t.Error("the disk's lock was released while its restore still waits")
	}
	if _, err := os.Stat(originalsPath(state, l.Name)); err != nil {
		t.Errorf("the originals record is gone while the restore waits: %v", err)
	}

	if rep.ElapsedS <= 0 || rep.WritesAfter != rep.WritesBefore || rep.ReadsAfter <= rep.ReadsBefore {
		t.Errorf("report: elapsed %.2fs, reads %d -> %d, writes %d -> %d", rep.ElapsedS, rep.ReadsBefore, rep.ReadsAfter, rep.WritesBefore, rep.WritesAfter)
	}
	done := rep.RestoreDone()
	if done == nil {
		t.Fatal("RestoreDone is nil with the restore pending")
	}
	g.Set(false) // the disk answers again
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the restore had not ended 10 s after the disk answered again")
	}
	if !lockFree(state, l.Name) {
		t.Error("the lock is held after the restore ended")
	}
	checkBack(t, live, l.Name, orig)
	if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("originals record left behind after the restore: %v", err)
	}
}
