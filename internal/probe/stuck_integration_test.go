package probe

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
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
	locks := testLocks(t)

	inFlight := tasks.NewWrites(nil)
	rep, err := probeStuck(t, g, Target{FS: live, StateDir: state, Locks: locks, Name: diskName(t, l.Name), InFlight: inFlight}, func(s string) {
		if len(s) > 5 && s[:5] == "round" {
			g.Set(true) // the first candidate is measured: the disk stops answering
		}
	})
	if !errors.Is(err, ErrRestorePending) {
		t.Fatalf("probe of a disk that stopped answering: err = %v, want ErrRestorePending", err)
	}
	if g.Waiting() == 0 {
		t.Error("no read is waiting at the gate: the disk never stopped answering")
	}
	if !locks.Held(l.Name) {
		t.Error("the disk's lock was released while its restore still waits")
	}
	if _, err := os.Stat(originalsPath(state, l.Name)); err != nil {
		t.Errorf("the originals record is gone while the restore waits: %v", err)
	}

	if rep.ElapsedS <= 0 || rep.WritesAfter != rep.WritesBefore || rep.ReadsAfter <= rep.ReadsBefore {
		t.Errorf("report: elapsed %.2fs, reads %d -> %d, writes %d -> %d", rep.ElapsedS, rep.ReadsBefore, rep.ReadsAfter, rep.WritesBefore, rep.WritesAfter)
	}
	if rep.RestoreDone() == nil {
		t.Fatal("RestoreDone is nil with the restore pending")
	}
	if w := inFlight.All(); len(w) != 1 || w[0].Disk != l.Name || w[0].What != "restore" {
		t.Errorf("writes in flight: %+v, want the restore of %s", w, l.Name)
	}
	afterTheDiskAnswers(t, g, live, state, locks, l.Name, orig, rep, inFlight)
}

// TestIntegrationStuckBeforeTheProbe: with --force, a disk whose queue
// holds another's read that does not complete (the disk stopped answering
// before the probe began) is found not answering while the probe sizes it,
// before anything is switched: the probe ends with ErrStuck within its
// bound, writes nothing and keeps no record or lock. (Before, the probe's
// first switch waited on the other's read.)
func TestIntegrationStuckBeforeTheProbe(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	l, g := looptest.AddGated(t, 7305, 64<<20)
	orig := startFrom(t, live, l.Name)
	state := t.TempDir()
	locks := testLocks(t)

	g.Set(true)
	read := holdARead(t, g, l.Name)
	inFlight := tasks.NewWrites(nil)
	rep, err := probeStuck(t, g, Target{FS: live, StateDir: state, Locks: locks, Name: diskName(t, l.Name), InFlight: inFlight}, nil)
	if !errors.Is(err, ErrStuck) || errors.Is(err, ErrRestorePending) {
		t.Fatalf("err = %v, want the disk found not answering, nothing to restore", err)
	}
	if w := inFlight.Of(l.Name); len(w) != 0 {
		t.Errorf("writes in flight: %+v, want none", w)
	}
	if locks.Held(l.Name) {
		t.Error("the disk's lock is held after a probe that switched nothing")
	}
	if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("originals record after a probe that switched nothing: %v", err)
	}
	if !rep.Restored {
		t.Error("report: not restored, yet nothing was switched")
	}
	g.Set(false)
	checkBack(t, live, l.Name, orig)
	if err := <-read; err != nil {
		t.Errorf("the other read: %v", err)
	}
}

// TestIntegrationStuckAfterSizing: with --force, the disk stops answering
// once the probe has sized it, before its first switch, with another's
// read in its queue: that read holds the switch. The probe gives up on it
// within a second of its bound, with its restore queued behind that switch
// (never beside it: two switches of one queue at once can crash the
// kernel). When the disk answers, the switch and then the restore are
// done, and the original is back. (Before, the probe waited in its first
// switch for as long as the disk did not answer.)
func TestIntegrationStuckAfterSizing(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	l, g := looptest.AddGated(t, 7307, 64<<20)
	orig := startFrom(t, live, l.Name)
	state := t.TempDir()
	locks := testLocks(t)

	var read <-chan error
	inFlight := tasks.NewWrites(nil)
	rep, err := probeStuck(t, g, Target{FS: live, StateDir: state, Locks: locks, Name: diskName(t, l.Name), InFlight: inFlight}, func(s string) {
		if strings.HasPrefix(s, "probing ") { // sized; the first switch is next
			g.Set(true)
			read = holdARead(t, g, l.Name)
		}
	})
	if read == nil {
		t.Fatal("the probe never announced its bound")
	}
	if !errors.Is(err, ErrStuck) || !errors.Is(err, ErrRestorePending) {
		t.Fatalf("err = %v, want the switch given up on and the restore pending", err)
	}
	if w := inFlight.Of(l.Name); len(w) != 2 || !strings.HasPrefix(w[0].What, "scheduler ") || w[1].What != "restore" {
		t.Errorf("writes in flight: %+v, want the switch given up on and the restore behind it", w)
	}
	if !locks.Held(l.Name) {
		t.Error("the disk's lock was let go while its switch and restore wait")
	}
	afterTheDiskAnswers(t, g, live, state, locks, l.Name, orig, rep, inFlight)
	if err := <-read; err != nil {
		t.Errorf("the other read: %v", err)
	}
}

// holdARead starts another's read of the disk, which the closed gate
// holds, and returns once it waits there; its error comes on the channel
// when the gate opens.
func holdARead(t *testing.T, g *looptest.Gate, name string) <-chan error {
	t.Helper()
	fd, err := unix.Open("/dev/"+name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	waiting := g.Waiting()
	read := make(chan error, 1)
	go func() {
		_, err := unix.Pread(fd, mem, 0)
		unix.Close(fd)
		read <- err
	}()
	waitUntil(t, "the other read at the gate", func() bool { return g.Waiting() > waiting })
	return read
}

// probeStuck probes a gated disk that does not answer (or stops to, as
// progress decides) and returns what Run did, failing t when the run
// exceeded its budget by more than a second. A run not over after 10 s
// opens the gate and ends t.
func probeStuck(t *testing.T, g *looptest.Gate, target Target, progress func(string)) (*Report, error) {
	t.Helper()
	o := Options{Options: probeopt.Options{Duration: 200 * time.Millisecond, Rounds: 1, Depth: 8, Engine: EngineIOUring}, Force: true}
	start := time.Now()
	var rep *Report
	var err error
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		rep, err = Run(context.Background(), target, o, func(s string) {
			t.Log(s)
			if progress != nil {
				progress(s)
			}
		})
	}()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		g.Set(false)
		<-ran
		t.Fatal("the probe was still running 10 s after it started, on a disk that does not answer (its budget is under 2 s)")
	}
	took := time.Since(start)
	t.Log(err)
	if rep == nil {
		t.Fatalf("no report: %v", err)
	}
	if took > time.Duration(rep.BudgetS*float64(time.Second))+time.Second {
		t.Errorf("took %s, budget %.2fs + 1s", took, rep.BudgetS)
	}
	return rep, err
}

// afterTheDiskAnswers opens the gate and waits for the probe's pending
// restore: then the originals must be back, the lock free, the record
// gone, and no write left in flight.
func afterTheDiskAnswers(t *testing.T, g *looptest.Gate, live sysfs.FS, state string, locks *disklock.Locks, name string, orig map[string]string, rep *Report, inFlight *tasks.Writes) {
	t.Helper()
	g.Set(false) // the disk answers again
	select {
	case <-rep.RestoreDone():
	case <-time.After(10 * time.Second):
		t.Fatal("the restore had not ended 10 s after the disk answered again")
	}
	checkBack(t, live, name, orig)
	if locks.Held(name) {
		t.Error("the lock is held after the restore ended")
	}
	if _, err := os.Stat(originalsPath(state, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("originals record left behind after the restore: %v", err)
	}
	if w := inFlight.All(); len(w) != 0 {
		t.Errorf("writes still in flight after the restore ended: %+v", w)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 5*time.Second, what, cond)
}

// TestIntegrationSlowDrainIsNotStuck: on a disk serving one read at a
// time, 20 ms each, the 32 reads a measurement leaves in flight take
// 640 ms to come back, one every 20 ms: with a grace of 200 ms neither
// engine calls that a disk that does not answer, as reads keep coming
// back. Once the disk stops answering, the reads in flight are given up
// on a grace after the last came back. (Before, every read had to be back
// within the grace of the measurement's end.)
func TestIntegrationSlowDrainIsNotStuck(t *testing.T) {
	looptest.Require(t)
	const perRead, depth, grace = 20 * time.Millisecond, 32, 200 * time.Millisecond
	l := looptest.AddSlow(t, 7308, 64<<20, perRead)
	fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	engines := []Engine{psyncEngine{}}
	if e, err := NewEngine(EngineIOUring); err == nil {
		engines = append(engines, e)
	}
	for _, e := range engines {
		start := time.Now()
		s, err := e.Run(context.Background(), &Job{FD: fd, BlockSize: 4096, Depth: depth, Deadline: start.Add(100 * time.Millisecond), Size: 64 << 20, Grace: grace})
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		// Reads were still coming back well past the grace.
		if drained := time.Since(start) - 100*time.Millisecond; drained <= grace {
			t.Errorf("%s: %d reads drained in %s, within the grace of %s: the test tests nothing", e.Name(), s.Reads, drained, grace)
		}
	}

	gated, gate := looptest.AddGated(t, 7309, 64<<20)
	gfd, err := unix.Open("/dev/"+gated.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(gfd)
	for _, e := range engines {
		gate.Set(true)
		_, err := e.Run(context.Background(), &Job{FD: gfd, BlockSize: 4096, Depth: 4, Deadline: time.Now().Add(50 * time.Millisecond), Size: 64 << 20, Grace: grace})
		if !errors.Is(err, ErrStuck) {
			t.Errorf("%s on a disk that does not answer: err = %v, want ErrStuck", e.Name(), err)
		}
		gate.Set(false)
	}
}
