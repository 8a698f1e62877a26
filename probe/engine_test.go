package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	// 2 candidates x 3 rounds x (switch + 0.25 s warm-up + 2 x 1 s) plus
	// the busy sample and the restore.
	if b := o.Budget(); b != busySample+6*(switchAllowance+250*time.Millisecond+2*time.Second)+restoreAllowance {
		t.Errorf("budget %s", b)
	}
	bad := Options{Candidates: []string{"none", "none"}, Duration: time.Hour, Rounds: 99, Depth: 0, BlockSize: 3000, Engine: "aio", Choose: "x", Margin: 2}
	err := bad.Validate()
	for _, w := range []string{"named twice", "duration", "rounds", "depth", "block size", "engine", "choose", "margin"} {
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
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "depth and block size: ")) {
			t.Errorf("depth %d x block size %d: Validate = %v", c.depth, c.blockSize, err)
		}
	}
}

// A disk that does not answer must not hold a measurement much past its
// end: a pipe nobody writes to stands in for it (io_uring waits for its
// reads as for a dead server's).
func TestEngineStuck(t *testing.T) {
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

// TestProcsRaiseOverlapping: two psync runs that overlap and end in
// either order leave GOMAXPROCS as it was before the first began, and it
// stays raised while either runs.
func TestProcsRaiseOverlapping(t *testing.T) {
	start := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(start)
	for _, firstEndsFirst := range []bool{true, false} {
		var r procsRaise
		a := r.raise(start + 8)
		b := r.raise(start + 4)
		if got := runtime.GOMAXPROCS(0); got != start+8 {
			t.Fatalf("both running: GOMAXPROCS %d, want %d", got, start+8)
		}
		if firstEndsFirst {
			a()
		} else {
			b()
		}
		if got := runtime.GOMAXPROCS(0); got < start+4 {
			t.Errorf("one still running: GOMAXPROCS %d, want at least %d", got, start+4)
		}
		if firstEndsFirst {
			b()
		} else {
			a()
		}
		if got := runtime.GOMAXPROCS(0); got != start {
			t.Errorf("first ends first %v: GOMAXPROCS %d after both, want %d", firstEndsFirst, got, start)
		}
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
