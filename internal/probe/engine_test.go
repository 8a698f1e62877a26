package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// TestEnginesOnAFile runs both engines over a patterned regular file (no
// root, no O_DIRECT): every block asked for is read once, with its bytes.
func TestEnginesOnAFile(t *testing.T) {
	const size, bs = 4 << 20, 4096
	p := filepath.Join(t.TempDir(), "data")
	buf := make([]byte, size)
	for s := 0; s < size; s += 512 {
		for i := 0; i < 512; i += 8 {
			binary.LittleEndian.PutUint64(buf[s+i:], uint64(s/512)*0x9e3779b97f4a7c15+uint64(i))
		}
	}
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	offs := make([]int64, 500)
	for i := range offs {
		offs[i] = int64((i*7919)%(size/bs)) * bs
	}
	engines := []Engine{psyncEngine{}}
	if e, err := NewEngine(EngineIOUring); err == nil {
		engines = append(engines, e)
	} else {
		t.Logf("io_uring not available here: %v", err)
	}
	for _, e := range engines {
		for _, depth := range []int{1, 4, 32} {
			s, got, bad, err := readOffsets(e, int(f.Fd()), bs, depth, offs)
			if err != nil {
				t.Fatalf("%s depth %d: %v", e.Name(), depth, err)
			}
			if s.Reads != int64(len(offs)) || bad != 0 {
				t.Errorf("%s depth %d: %d reads (want %d), %d with wrong bytes", e.Name(), depth, s.Reads, len(offs), bad)
			}
			for _, o := range offs {
				if got[o] != 1 {
					t.Errorf("%s depth %d: block %d read %d times", e.Name(), depth, o, got[o])
					break
				}
			}
		}
	}
}

// A read past the end comes back short: an error naming the offset, not
// figures.
func TestEngineShortRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	engines := []Engine{psyncEngine{}}
	if e, err := NewEngine(EngineIOUring); err == nil {
		engines = append(engines, e)
	}
	for _, e := range engines {
		var n atomic.Int64
		_, err := e.Run(context.Background(), &Job{FD: int(f.Fd()), BlockSize: 4096, Depth: 2, Deadline: time.Now().Add(time.Minute),
			Offsets: func(int) func() (int64, bool) {
				return func() (int64, bool) {
					if n.Add(1) > 4 {
						return 0, false
					}
					return 1 << 20, true
				}
			}})
		if err == nil || !strings.Contains(err.Error(), "read at 1048576") {
			t.Errorf("%s: err = %v", e.Name(), err)
		}
	}
}

func TestOptionsValidateAndBudget(t *testing.T) {
	t.Parallel()
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	// 2 candidates x 3 rounds x (switch + 0.1 s warm-up + 5 x 0.4 s: the
	// curve's 1, 4, 16 and 64, and the deep queue's 32; each measurement
	// and the warm-up with the floor of its drain) plus the busy sample
	// and the restore: within the 15 s a default probe is allowed on a
	// disk that answers at once.
	b := o.Budget()
	if b != busySample+6*(switchAllowance+100*time.Millisecond+drainFloor+5*(400*time.Millisecond+drainFloor))+restoreAllowance || b > 15*time.Second {
		t.Errorf("budget %s", b)
	}
	// A deep queue among the curve's depths is measured once: the old
	// probe's two measurements, at depth 1 and 32, and a curve of those.
	o.Depths, o.Duration = []int{1, 32}, time.Second
	if b := o.Budget(); b != busySample+6*(switchAllowance+250*time.Millisecond+drainFloor+2*(time.Second+drainFloor))+restoreAllowance {
		t.Errorf("budget with depths 1 and 32: %s", b)
	}
	if got := CapDepths([]int{1, 4, 16, 64}, 32); !slices.Equal(got, []int{1, 4, 16, 32}) {
		t.Errorf("depths capped at 32 tags: %v", got)
	}
	if got := CapDepths([]int{1, 4, 16, 64}, 4); !slices.Equal(got, []int{1, 4}) {
		t.Errorf("depths capped at 4 tags: %v", got)
	}
	if got := CapDepths([]int{1, 4, 16, 64}, 0); !slices.Equal(got, []int{1, 4, 16, 64}) {
		t.Errorf("depths with the queue depth unknown: %v", got)
	}
	bad := Options{Options: probeopt.Options{Candidates: []string{"none", "none"}, Duration: time.Hour, Rounds: 99, Depth: 0, BlockSize: 3000, Engine: "aio", Choose: "x", Margin: 2}}
	err := bad.Validate()
	for _, w := range []string{"named twice", "duration", "rounds", "depth", "block_size", "engine", "choose", "margin"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate does not report %q: %v", w, err)
		}
	}
	for _, c := range []struct {
		depth, blockSize int
		ok               bool
	}{
		{64, 1 << 20, true},
		{1024, 64 << 10, true},
		{128, 1 << 20, false},
		{1024, 1 << 20, false},
	} {
		o := DefaultOptions()
		o.Depth, o.BlockSize = c.depth, c.blockSize
		err := o.Validate()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "depth and block_size: ")) {
			t.Errorf("depth %d x block size %d: Validate = %v", c.depth, c.blockSize, err)
		}
	}
}

// A disk that does not answer must not hold a measurement much past its
// end: a pipe nobody writes to stands in for it (io_uring waits for its
// reads as for a dead server's).
func TestEngineStuck(t *testing.T) {
	// Not parallel: it bounds how long the engine takes to give up, which
	// other tests' load on the CPUs would stretch.
	e, err := NewEngine(EngineIOUring)
	if err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	start := time.Now()
	_, err = e.Run(context.Background(), &Job{FD: p[0], BlockSize: 4096, Depth: 4, Deadline: start.Add(100 * time.Millisecond),
		Offsets: func(int) func() (int64, bool) { return func() (int64, bool) { return 0, true } }})
	took := time.Since(start)
	if !errors.Is(err, ErrStuck) {
		t.Fatalf("err = %v, want ErrStuck", err)
	}
	if took < 100*time.Millisecond+hangGrace || took > 100*time.Millisecond+hangGrace+300*time.Millisecond {
		t.Errorf("gave up after %s; want the deadline plus %s", took, hangGrace)
	}
}

// readOffsets reads the blocks at offs once each with e, checking each
// block's bytes against the pattern the test data was written with: how
// often each offset was read, and how many reads returned other bytes.
func readOffsets(e Engine, fd, bs, depth int, offs []int64) (*Sample, map[int64]int, int, error) {
	var next atomic.Int64
	var mu sync.Mutex
	seen := map[int64]int{}
	bad := 0
	s, err := e.Run(context.Background(), &Job{FD: fd, BlockSize: bs, Depth: depth, Deadline: time.Now().Add(time.Minute),
		Offsets: func(int) func() (int64, bool) {
			return func() (int64, bool) {
				i := next.Add(1) - 1
				if i >= int64(len(offs)) {
					return 0, false
				}
				return offs[i], true
			}
		},
		Check: func(off int64, data []byte) {
			ok := wantPattern(off, data)
			mu.Lock()
			defer mu.Unlock()
			seen[off]++
			if !ok {
				bad++
			}
		},
	})
	return s, seen, bad, err
}

// TestEngineTable walks the engine table: every engine of probeopt's list
// (which the policy validates against) has its code here, and no code is
// left without an entry; each entry builds the
// engine it names or says why the kernel does not allow it; NewEngine
// finds each by name and refuses others; an engine reports worker runs
// exactly when the table says it sees punting; and the goroutines an
// engine asks for cover its readers.
func TestEngineTable(t *testing.T) {
	t.Parallel()
	names := probeopt.EngineNames()
	for _, e := range engines {
		if e.new == nil {
			t.Fatalf("engine %s (probeopt's list) has no code in engineCodes", e.name)
		}
	}
	for name := range engineCodes {
		if !slices.Contains(names, name) {
			t.Errorf("engineCodes has %s, which probeopt does not list", name)
		}
	}
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, spec := range engines {
		o := probeopt.Default()
		o.Engine = spec.name
		if err := o.Validate(); err != nil {
			t.Errorf("%s: probeopt refuses it: %v", spec.name, err)
		}
		e, err := spec.new()
		if err != nil {
			t.Logf("%s: not available here: %v", spec.name, err)
			if _, err2 := NewEngine(spec.name); err2 == nil {
				t.Errorf("%s: NewEngine succeeds where its constructor fails", spec.name)
			}
			continue
		}
		if e.Name() != spec.name {
			t.Errorf("entry %s builds an engine named %s", spec.name, e.Name())
		}
		if byName, err := NewEngine(spec.name); err != nil || byName.Name() != spec.name {
			t.Errorf("NewEngine(%s) = %v, %v", spec.name, byName, err)
		}
		s, _, _, err := readOffsets(e, int(f.Fd()), 4096, 4, []int64{0, 4096, 8192, 12288})
		if err != nil {
			t.Fatalf("%s: %v", spec.name, err)
		}
		if !spec.seesPunting && s.WorkerRuns != -1 {
			t.Errorf("%s: WorkerRuns %d, though the table says it cannot see punting", spec.name, s.WorkerRuns)
		}
		if spec.seesPunting && s.WorkerRuns < 0 && workerRuns() >= 0 {
			t.Errorf("%s: no worker runs reported, though the table says it sees punting", spec.name)
		}
		if EngineSeesPunting(spec.name) != spec.seesPunting {
			t.Errorf("EngineSeesPunting(%s) disagrees with the table", spec.name)
		}
		for _, depth := range []int{1, 8, probeopt.MaxDepth} {
			if spec.procs != nil && spec.procs(depth) < depth {
				t.Errorf("%s at depth %d asks for %d goroutines: fewer than its readers", spec.name, depth, spec.procs(depth))
			}
			// The deepest measurement counts, the curve's or the
			// deep-queue one.
			for _, curve := range [][]int{{1, 4}, {1, 64}} {
				opts := DefaultOptions()
				opts.Engine, opts.Depth, opts.Depths = spec.name, depth, curve
				want := 0
				if spec.procs != nil {
					want = spec.procs(max(depth, curve[1]))
				}
				if got := procsFor(opts); got != want {
					t.Errorf("procsFor(%s, depth %d, depths %v) = %d, the table's %d", spec.name, depth, curve, got, want)
				}
			}
		}
	}
	if _, err := NewEngine("libaio"); err == nil || !strings.Contains(err.Error(), strings.Join(names, " or ")) {
		t.Errorf("NewEngine(libaio) = %v; want an error naming %v", err, names)
	}
	if e, err := NewEngine(""); err != nil || e.Name() != firstAvailable(t) {
		t.Errorf(`NewEngine("") = %v, %v; want the first the kernel allows`, e, err)
	}
}

func firstAvailable(t *testing.T) string {
	for _, spec := range engines {
		if _, err := spec.new(); err == nil {
			return spec.name
		}
	}
	t.Fatal("no engine is available")
	return ""
}
