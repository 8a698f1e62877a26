package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers 7300-7349 (see internal/looptest).

func liveFS(t *testing.T) sysfs.FS {
	t.Helper()
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// patternLoop is a bound loop device whose backing file (never the device)
// is filled with a pattern: each 512-byte sector holds its own index.
func patternLoop(t *testing.T, n int, size int64) *looptest.Loop {
	t.Helper()
	l := looptest.Add(t, n)
	l.Bind(t, size)
	f, err := os.OpenFile(l.Backing, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		for s := 0; s < len(buf); s += 512 {
			sector := uint64(off+int64(s)) / 512
			for i := 0; i < 512; i += 8 {
				binary.LittleEndian.PutUint64(buf[s+i:], sector*0x9e3779b97f4a7c15+uint64(i))
			}
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func wantPattern(off int64, data []byte) bool {
	for s := 0; s < len(data); s += 512 {
		sector := uint64(off+int64(s)) / 512
		for i := 0; i < 512; i += 8 {
			if binary.LittleEndian.Uint64(data[s+i:]) != sector*0x9e3779b97f4a7c15+uint64(i) {
				return false
			}
		}
	}
	return true
}

// TestIntegrationEnginesReadTheSame gives io_uring and psync the same list
// of blocks of a patterned disk: each must read every block once and get
// the bytes the backing file holds there.
func TestIntegrationEnginesReadTheSame(t *testing.T) {
	looptest.Require(t)
	const size = 32 << 20
	l := patternLoop(t, 7300, size)
	fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	const bs = 4096
	rng := rand.New(rand.NewPCG(1, 2))
	offs := make([]int64, 3000)
	for i := range offs {
		offs[i] = int64(rng.IntN(size/bs)) * bs
	}
	read := func(e Engine, depth int) map[int64]int {
		s, seen, bad, err := readOffsets(e, fd, bs, depth, offs)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if s.Reads != int64(len(offs)) || len(s.Latencies) != len(offs) {
			t.Errorf("%s: %d reads, %d latencies; want %d", e.Name(), s.Reads, len(s.Latencies), len(offs))
		}
		if bad > 0 {
			t.Errorf("%s: %d reads returned bytes that are not the backing file's", e.Name(), bad)
		}
		return seen
	}
	want := map[int64]int{}
	for _, o := range offs {
		want[o]++
	}
	uring, err := NewEngine(EngineIOUring)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e     Engine
		depth int
	}{{uring, 32}, {uring, 1}, {psyncEngine{}, 8}, {psyncEngine{}, 1}} {
		got := read(tc.e, tc.depth)
		if len(got) != len(want) {
			t.Errorf("%s depth %d: %d distinct blocks, want %d", tc.e.Name(), tc.depth, len(got), len(want))
		}
		for o, n := range want {
			if got[o] != n {
				t.Errorf("%s depth %d: block at %d read %d times, want %d", tc.e.Name(), tc.depth, o, got[o], n)
				break
			}
		}
	}
}

// startFrom sets the disk to a scheduler that is not a candidate (kyber, or
// bfq) with settings a switch resets, and returns them.
func startFrom(t *testing.T, fs sysfs.FS, name string) map[string]string {
	t.Helper()
	_, offered, err := fs.ReadScheduler(name)
	if err != nil {
		t.Fatal(err)
	}
	set := func(attr, v string) {
		if err := fs.WriteQueueAttr(name, attr, v); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case slices.Contains(offered, "kyber"):
		set("scheduler", "kyber")
		set("nr_requests", "64")
		set("iosched/read_lat_nsec", "1234000")
	case slices.Contains(offered, "bfq"):
		set("scheduler", "bfq")
		set("nr_requests", "64")
		set("iosched/slice_idle", "3")
	default:
		t.Fatalf("%s offers neither kyber nor bfq (%v): no non-candidate to start from", name, offered)
	}
	values, err := originals.Capture(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	return values
}

func checkBack(t *testing.T, fs sysfs.FS, name string, want map[string]string) {
	t.Helper()
	values, err := originals.Capture(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if values[k] != v {
			t.Errorf("%s %s = %q, want %q (the original)", name, k, values[k], v)
		}
	}
}

func quick() Options {
	return Options{Options: probeopt.Options{Duration: 60 * time.Millisecond, Rounds: 2, Depth: 16}}
}

// TestIntegrationProbe probes a loop device that runs kyber (not a
// candidate): both candidates get plausible figures, nothing is written to
// the disk, kyber and its settings are back, and the run kept its budget.
func TestIntegrationProbe(t *testing.T) {
	looptest.Require(t)
	fs := liveFS(t)
	l := looptest.Add(t, 7301)
	l.Bind(t, 64<<20)
	orig := startFrom(t, fs, l.Name)
	state := t.TempDir()
	locks := testLocks(t)

	for _, engine := range []string{EngineIOUring, EnginePsync} {
		t.Run(engine, func(t *testing.T) {
			o := quick()
			o.Engine = engine
			start := time.Now()
			rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, func(s string) { t.Log(s) })
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if took > time.Duration(rep.BudgetS*float64(time.Second))+time.Second {
				t.Errorf("took %s, budget %.2fs", took, rep.BudgetS)
			}
			if rep.Original != orig["scheduler"] || !rep.Restored || rep.Engine != engine {
				t.Errorf("original %s restored %v engine %s", rep.Original, rep.Restored, rep.Engine)
			}
			if rep.WritesAfter != rep.WritesBefore || rep.ReadsAfter <= rep.ReadsBefore {
				t.Errorf("stat: reads %d -> %d, writes %d -> %d", rep.ReadsBefore, rep.ReadsAfter, rep.WritesBefore, rep.WritesAfter)
			}
			if len(rep.Candidates) != 2 || rep.Winner == "" || rep.Reason == "" {
				t.Fatalf("candidates %d winner %q reason %q", len(rep.Candidates), rep.Winner, rep.Reason)
			}
			for _, c := range rep.Candidates {
				f := c.Figures
				// A /dev/shm-backed loop does tens of thousands of 4 KiB
				// reads a second on the slowest machine this runs on.
				if f.IOPS < 2000 || f.QD1IOPS < 1000 || f.P50us <= 0 || f.P99us < f.P50us || f.P999us < f.P99us ||
					f.QD1P99 < f.QD1P50 || f.MiBs < f.IOPS*4096/(1<<20)*0.99 || f.CPUPerIOus <= 0 {
					t.Errorf("%s: implausible figures %+v", c.Scheduler, f)
				}
				if len(c.Rounds) != 2 || c.Rounds[0].Position == c.Rounds[1].Position {
					t.Errorf("%s: rounds %+v: want two, in alternating positions", c.Scheduler, c.Rounds)
				}
			}
			if rep.NoWait == nil || !*rep.NoWait {
				t.Errorf("nowait = %v (%s); loop is NOWAIT-capable", rep.NoWait, rep.NoWaitReason)
			}
			if engine == EngineIOUring && rep.Punted == nil {
				t.Errorf("io_uring: punting not reported")
			}
			checkBack(t, fs, l.Name, orig)
			if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("originals record left behind: %v", err)
			}
		})
	}

	t.Run("apply keeps the winner", func(t *testing.T) {
		o := quick()
		o.Apply = true
		rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := fs.ReadQueueAttr(l.Name, "scheduler")
		if err != nil {
			t.Fatal(err)
		}
		if cur != rep.Winner || rep.Applied != rep.Winner {
			t.Errorf("scheduler %s, applied %q, winner %s", cur, rep.Applied, rep.Winner)
		}
		if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("originals record left behind: %v", err)
		}
		orig = startFrom(t, fs, l.Name)
	})

	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		o := quick()
		o.Duration = time.Second
		time.AfterFunc(400*time.Millisecond, cancel)
		start := time.Now()
		rep, err := Run(ctx, Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, nil)
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("err = %v, want ErrInterrupted", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("took %s to stop", took)
		}
		if rep == nil || !rep.Restored {
			t.Errorf("not restored: %+v", rep)
		}
		checkBack(t, fs, l.Name, orig)
	})

	// What a probe killed mid-measurement leaves: the record, and a
	// candidate in place.
	killed := func(t *testing.T) *record {
		t.Helper()
		rec, err := newRecord(fs, state, l.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.save(); err != nil {
			t.Fatal(err)
		}
		if err := rec.switchTo(fs, "none"); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	t.Run("recover after a killed probe", func(t *testing.T) {
		killed(t)
		got, err := RecoverInterrupted(state, locks, fs)
		if err != nil || len(got) != 1 || !got[0].Restored || got[0].Device != l.Name {
			t.Fatalf("RecoverInterrupted = %+v, %v", got, err)
		}
		checkBack(t, fs, l.Name, orig)
		if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record not cleared: %v", err)
		}
		// A record whose probe still runs (its lock held) is left alone.
		killed(t)
		unlock, err := disklock.New(locks.Path()).Lock(l.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := RecoverInterrupted(state, locks, fs); len(got) != 0 {
			t.Errorf("recovered a running probe's record: %+v", got)
		}
		unlock()
		got, err = RecoverInterrupted(state, locks, fs)
		if err != nil || len(got) != 1 || !got[0].Restored {
			t.Fatalf("RecoverInterrupted once the lock is free = %+v, %v", got, err)
		}
		checkBack(t, fs, l.Name, orig)
	})

	// The disk came back with its original settings (the kernel finished
	// a restore after the probe's process had ended), then an admin set
	// mq-deadline and nr_requests 77: the record is no longer true, and
	// replaying it would undo the admin. It is dropped, saying why, and
	// the admin's values stay. (Before, they were "restored" over.)
	t.Run("a record the disk no longer shows is dropped", func(t *testing.T) {
		rec := killed(t)
		admin := map[string]string{"scheduler": "mq-deadline", "nr_requests": "77"}
		if err := rec.disk().Restore(fs, l.Name); err != nil { // the kernel's late restore
			t.Fatal(err)
		}
		for _, a := range []string{"scheduler", "nr_requests"} {
			if err := fs.WriteQueueAttr(l.Name, a, admin[a]); err != nil {
				t.Fatal(err)
			}
		}
		got, err := RecoverInterrupted(state, locks, fs)
		if err != nil || len(got) != 1 || got[0].Restored || got[0].Err != nil ||
			!strings.Contains(got[0].Note, "no longer shows what iosched left") || !strings.Contains(got[0].Note, "mq-deadline") {
			t.Fatalf("RecoverInterrupted = %+v, %v; want the record dropped, naming what differs", got, err)
		}
		checkBack(t, fs, l.Name, admin)
		if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale record not cleared: %v", err)
		}
		orig = startFrom(t, fs, l.Name)
	})
}

// TestIntegrationRefusals: every refusal says why, and changes nothing.
func TestIntegrationRefusals(t *testing.T) {
	looptest.Require(t)
	fs := liveFS(t)
	l := looptest.Add(t, 7302)
	l.Bind(t, 16<<20)
	orig := startFrom(t, fs, l.Name)
	small := looptest.Add(t, 7303)
	small.Bind(t, 512<<10)
	state := t.TempDir()
	locks := testLocks(t)
	run := func(name string, o Options, devDir string) error {
		_, err := Run(context.Background(), Target{FS: fs, DevDir: devDir, StateDir: state, Locks: locks, Name: diskName(t, name)}, o, nil)
		return err
	}
	expect := func(t *testing.T, err error, words ...string) {
		t.Helper()
		var r *Refusal
		if !errors.As(err, &r) {
			t.Fatalf("err = %v, want a refusal", err)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not say %q", err, w)
			}
		}
	}

	t.Run("zram", func(t *testing.T) {
		z := looptest.AddZram(t, 16<<20)
		expect(t, run(z.Name, quick(), ""), "bio-based", "no scheduler")
	})
	t.Run("fewer than two candidates offered", func(t *testing.T) {
		o := quick()
		o.Candidates = []string{"none", "noop-not-here"}
		expect(t, run(l.Name, o, ""), "offers 1 of the candidates")
	})
	t.Run("too small", func(t *testing.T) {
		o := quick()
		o.BlockSize = 4096
		expect(t, run(small.Name, o, ""), "too small")
	})
	t.Run("missing node", func(t *testing.T) {
		expect(t, run(l.Name, quick(), t.TempDir()), "device node", "missing")
	})
	// A --dev node must be the disk's block device, checked before any
	// read. Before, a FIFO in its place hung the probe in open(2), past
	// SIGTERM.
	t.Run("FIFO node", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(dir, l.Name), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- run(l.Name, quick(), dir) }()
		select {
		case err := <-done:
			expect(t, err, filepath.Join(dir, l.Name), "not a block device")
		case <-time.After(10 * time.Second):
			t.Fatal("the probe blocked opening a FIFO as the disk's node")
		}
	})
	t.Run("another disk's node", func(t *testing.T) {
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+small.Name, &st); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := unix.Mknod(filepath.Join(dir, l.Name), unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
			t.Fatal(err)
		}
		other := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		expect(t, run(l.Name, quick(), dir), "is device "+other, "not the disk's")
	})
	t.Run("busy", func(t *testing.T) {
		fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // someone else reading the disk
			defer close(done)
			rb, err := alignedBuffers(1, 4096)
			if err != nil {
				return
			}
			defer rb.release()
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = unix.Pread(fd, rb.bufs[0], (i%1000)*4096)
			}
		}()
		err = run(l.Name, quick(), "")
		close(stop)
		<-done
		expect(t, err, "busy", "by others")
		if !errors.Is(err, ErrOthersIO) || strings.Contains(err.Error(), "--force") {
			t.Errorf("refusal %q: want ErrOthersIO as its cause, and no flag named (the CLI's advice)", err)
		}
	})
	t.Run("second probe at once", func(t *testing.T) {
		unlock, err := disklock.New(locks.Path()).Lock(l.Name)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		expect(t, run(l.Name, quick(), ""), "another probe", "running")
	})
	checkBack(t, fs, l.Name, orig)
}
