package probe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
)

// Loop numbers 7720-7759 (see internal/looptest).

// handoffRun reads dev through the io_uring engine at depth for d and
// returns the sample; the test fails when worker runs cannot be seen.
func handoffRun(t *testing.T, dev string, depth int, size int64, d time.Duration) *Sample {
	t.Helper()
	if workerRuns() < 0 {
		looptest.Missing(t, "no schedstat: io_uring worker runs cannot be counted")
	}
	fd, err := unix.Open("/dev/"+dev, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	e, err := newUringEngine()
	if err != nil {
		looptest.Missing(t, err.Error())
	}
	s, err := e.Run(context.Background(), &Job{FD: fd, BlockSize: 4096, Depth: depth, Deadline: time.Now().Add(d), Size: size, Seed: 1})
	if err != nil {
		t.Fatalf("%s depth %d: %v", dev, depth, err)
	}
	if s.WorkerRuns < 0 {
		t.Fatalf("%s: worker runs not counted", dev)
	}
	t.Logf("%s depth %d: %d reads, %d io-wq worker runs", dev, depth, s.Reads, s.WorkerRuns)
	return s
}

func writeQueue(t *testing.T, dev, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/sys/block", dev, "queue", file), []byte(v), 0); err != nil {
		t.Fatalf("%s: %s=%s: %v", dev, file, v, err)
	}
}

// TestIntegrationHandoffsFollowNrRequests drives a loop at depth 32 under
// mq-deadline twice: with nr_requests 4, a read finds no scheduler request
// free most of the time and io_uring hands it to io-wq; with nr_requests
// above the depth it never has to.
func TestIntegrationHandoffsFollowNrRequests(t *testing.T) {
	looptest.Require(t)
	const size = 64 << 20
	l := looptest.Add(t, 7720)
	l.Bind(t, size)
	writeQueue(t, l.Name, "scheduler", "mq-deadline")
	writeQueue(t, l.Name, "nr_requests", "4")
	few := handoffRun(t, l.Name, 32, size, 300*time.Millisecond)
	writeQueue(t, l.Name, "nr_requests", "64")
	enough := handoffRun(t, l.Name, 32, size, 300*time.Millisecond)
	if few.WorkerRuns == 0 {
		t.Errorf("nr_requests 4 at depth 32: no io-wq worker ran in %d reads", few.Reads)
	}
	if enough.WorkerRuns*10 > few.WorkerRuns {
		t.Errorf("nr_requests 64 at depth 32: %d worker runs, nr_requests 4: %d; want ten times fewer", enough.WorkerRuns, few.WorkerRuns)
	}
}

// TestIntegrationHandoffsWithoutNowait reads zram, whose driver is not
// nowait-capable (every io_uring read goes through io-wq), and a loop,
// which is (none does), at depth 1.
func TestIntegrationHandoffsWithoutNowait(t *testing.T) {
	looptest.Require(t)
	const size = 64 << 20
	l := looptest.Add(t, 7721)
	l.Bind(t, size)
	if b, err := os.ReadFile(filepath.Join("/sys/block", l.Name, "queue/scheduler")); err != nil || !strings.Contains(string(b), "[none]") {
		writeQueue(t, l.Name, "scheduler", "none")
	}
	z := looptest.AddZram(t, size)
	loop := handoffRun(t, l.Name, 1, size, 300*time.Millisecond)
	zram := handoffRun(t, z.Name, 1, size, 300*time.Millisecond)
	if zram.WorkerRuns < zram.Reads/4 {
		t.Errorf("zram: %d io-wq worker runs for %d reads; want one for most reads (each is handed to a worker)", zram.WorkerRuns, zram.Reads)
	}
	if loop.WorkerRuns*10 > zram.WorkerRuns {
		t.Errorf("loop: %d io-wq worker runs, zram %d; want ten times fewer", loop.WorkerRuns, zram.WorkerRuns)
	}
}

// TestIntegrationProbeCountsHandoffs runs a probe with each engine: with
// io_uring every curve point, of every round and of the medians, carries
// its count of io-wq hand-offs; with psync, which cannot see them, none
// does.
func TestIntegrationProbeCountsHandoffs(t *testing.T) {
	looptest.Require(t)
	fs := liveFS(t)
	l := looptest.Add(t, 7722)
	l.Bind(t, 64<<20)
	state := t.TempDir()
	locks := testLocks(t)
	for _, engine := range []string{EngineIOUring, EnginePsync} {
		o := quick()
		o.Engine = engine
		rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, nil)
		if err != nil {
			t.Fatalf("%s: %v", engine, err)
		}
		for _, c := range rep.Candidates {
			curves := [][]CurvePoint{c.Curve}
			for _, r := range c.Rounds {
				curves = append(curves, r.Curve)
			}
			for _, curve := range curves {
				if len(curve) == 0 {
					t.Fatalf("%s %s: no curve", engine, c.Scheduler)
				}
				for _, p := range curve {
					if seen := p.IOWorkerRuns.Known; seen != (engine == EngineIOUring) {
						t.Errorf("%s %s depth %d: hand-offs counted %v, want %v", engine, c.Scheduler, p.Depth, seen, engine == EngineIOUring)
					}
				}
			}
		}
	}
}
