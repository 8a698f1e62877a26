package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// Engine names (probeopt's, which the policy validates against).
const (
	EngineIOUring = probeopt.EngineIOUring
	EnginePsync   = probeopt.EnginePsync
)

// engineCode is an engine's code, attached to the entry of probeopt's
// engine list (its name, what it can report) that the policy validates
// [rule.probe] against without this package. Adding an engine is a file
// with its type and constructor, its entry in probeopt, and its code here
// under the entry's name (TestEngineTable fails until both are there).
type engineCode struct {
	// new returns the engine, or why the kernel does not allow it here.
	new func() (Engine, error)
	// procs is how many goroutines must run at once (Ps, GOMAXPROCS) for
	// a measurement at depth to time the disk rather than the Go
	// scheduler; 0 when the engine's own goroutine is enough. Runner.Procs
	// is asked for them.
	procs func(depth int) int
}

var engineCodes = map[string]engineCode{
	EngineIOUring: {new: newUringEngine},
	EnginePsync:   {new: newPsyncEngine, procs: psyncProcs},
}

// engineSpec is one engine: its entry in probeopt and its code.
type engineSpec struct {
	name        string
	seesPunting bool // Sample.WorkerRuns is counted
	engineCode
}

// engines, in probeopt's order: the order Engine "" tries them.
var engines = func() []engineSpec {
	var out []engineSpec
	for _, info := range probeopt.Engines() {
		out = append(out, engineSpec{name: info.Name, seesPunting: info.SeesPunting, engineCode: engineCodes[info.Name]})
	}
	return out
}()

func engineSpecOf(name string) (engineSpec, bool) {
	for _, e := range engines {
		if e.name == name {
			return e, true
		}
	}
	return engineSpec{}, false
}

// EngineSeesPunting reports whether the engine named can tell whether
// io_uring punted reads to worker threads (Report.Punted).
func EngineSeesPunting(name string) bool {
	e, _ := engineSpecOf(name)
	return e.seesPunting
}

// Engine issues reads of one disk, at most Job.Depth at a time, and times
// each. It is the only part of a probe that does I/O on the disk.
type Engine interface {
	Name() string
	// Run reads until the job's deadline, until its offsets run out, or
	// until ctx ends, and returns what was done. Every read it started has
	// completed when it returns.
	Run(ctx context.Context, j *Job) (*Sample, error)
}

// Job is one measurement's reads.
type Job struct {
	// FD is the disk's node opened O_RDONLY|O_DIRECT.
	FD        int
	BlockSize int
	Depth     int
	Deadline  time.Time
	// Offsets returns worker w's source of offsets (each a multiple of
	// BlockSize); ok false ends that worker. io_uring has one worker,
	// psync Depth. Nil: random blocks over Size bytes.
	Offsets func(w int) func() (off int64, ok bool)
	// Size is the disk's size, for random offsets.
	Size int64
	// Seed makes random offsets repeatable.
	Seed uint64
	// Grace: past Deadline, the reads in flight are given up on
	// (ErrStuck: the disk does not answer) when none has completed for
	// Grace, since Deadline or the last completion after it; 0 means
	// hangGrace. A probe scales it with the disk's read time and the
	// depth: a slow disk still draining is not a dead one.
	Grace time.Duration
	// GiveUp, when set, is when the reads in flight are given up on
	// even if they still complete (the probe's budget is spent).
	GiveUp time.Time
	// Check, when set, is given each completed read's data (tests compare
	// engines with it). It may be called from several goroutines.
	Check func(off int64, data []byte)
	// PlainBuffers keeps io_uring from registering its buffers (for the
	// benchmark that measures what registering gains).
	PlainBuffers bool
	// SubmitWithWait makes io_uring submit the reads a wait freed together
	// with its next wait, in one call, and NoYield keeps psync readers from
	// yielding, all else unchanged: for the benchmark that measures what
	// each of the two gains (see uringEngine, yieldEvery).
	SubmitWithWait, NoYield bool
}

// Sample is what one Run did.
type Sample struct {
	Reads   int64
	Elapsed time.Duration
	// Latencies of each read in nanoseconds (from submission to the
	// completion seen), in no order.
	Latencies []uint32
	// CPU is the process's user+system CPU time over the run.
	CPU time.Duration
	// WorkerRuns is how often io_uring worker threads ran during the run
	// (reads punted out of line when > 0); -1 when unknown or not io_uring.
	WorkerRuns int64
}

// NewEngine returns the engine named name, or with "" the first of the
// table's the kernel allows.
func NewEngine(name string) (Engine, error) {
	if name != "" {
		e, ok := engineSpecOf(name)
		if !ok {
			return nil, fmt.Errorf("unknown engine %q: want %s", name, strings.Join(probeopt.EngineNames(), " or "))
		}
		return e.new()
	}
	var errs []error
	for _, e := range engines {
		eng, err := e.new()
		if err == nil {
			return eng, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no engine can read here: %w", errors.Join(errs...))
}

// EngineName is the name of the engine NewEngine(name) would return,
// without setting one up: a named engine is known by its name, so a
// lookup of remembered results (Runner.Lookup) sets up no io_uring ring
// to learn it. For "", the first engine the kernel allows is found once a
// process (defaultEngine): which one does not change while it runs.
func EngineName(name string) (string, error) {
	if name != "" {
		if _, ok := engineSpecOf(name); !ok {
			return "", fmt.Errorf("unknown engine %q: want %s", name, strings.Join(probeopt.EngineNames(), " or "))
		}
		return name, nil
	}
	return defaultEngine()
}

var defaultEngine = sync.OnceValues(func() (string, error) {
	eng, err := NewEngine("")
	if err != nil {
		return "", err
	}
	return eng.Name(), nil
})

// procsFor is how many goroutines a probe with o needs running at once
// (see engineSpec.procs): 0 when its engine needs no more than one.
func procsFor(o Options) int {
	o.fill()
	name, err := EngineName(o.Engine)
	if err != nil {
		return 0
	}
	if e, ok := engineSpecOf(name); ok && e.procs != nil {
		return e.procs(slices.Max(measuredDepths(o.Depths, o.Depth)))
	}
	return 0
}

func (j *Job) grace() time.Duration {
	if j.Grace > 0 {
		return j.Grace
	}
	return hangGrace
}

// stuckAt is when the reads in flight are given up on, the last of them
// having completed at last (zero: none since the deadline).
func (j *Job) stuckAt(last time.Time) time.Time {
	from := j.Deadline
	if last.After(from) {
		from = last
	}
	at := from.Add(j.grace())
	if !j.GiveUp.IsZero() && j.GiveUp.Before(at) {
		at = j.GiveUp
	}
	return at
}

// stuckError says what was given up on.
func (j *Job) stuckError(inFlight int, last time.Time) error {
	since := "the measurement's end"
	if last.After(j.Deadline) {
		since = "the last completion"
	}
	return fmt.Errorf("%d reads in flight, none completed within %s of %s: %w", inFlight, j.grace(), since, ErrStuck)
}

func (j *Job) offsets(w int) func() (int64, bool) {
	if j.Offsets != nil {
		return j.Offsets(w)
	}
	blocks := uint64(j.Size / int64(j.BlockSize))
	rng := rand.New(rand.NewPCG(j.Seed, uint64(w)+1))
	bs := int64(j.BlockSize)
	return func() (int64, bool) { return int64(rng.Uint64N(blocks)) * bs, true }
}

// readBuffers are a measurement's read buffers: n buffers of size bytes
// each, page aligned as O_DIRECT needs, mapped outside the Go heap (the
// kernel writes them while no Go pointer may be watching).
type readBuffers struct {
	mem  []byte
	bufs [][]byte
	kept bool
}

// alignedBuffers maps n buffers of size bytes each.
func alignedBuffers(n, size int) (*readBuffers, error) {
	mem, err := unix.Mmap(-1, 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d read buffers: %w", n, err)
	}
	b := &readBuffers{mem: mem, bufs: make([][]byte, n)}
	for i := range b.bufs {
		b.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return b, nil
}

// keep leaves the buffers mapped for good: a read left behind (stuck in
// the device) writes into its buffer if it ever completes.
func (b *readBuffers) keep() { b.kept = true }

// release unmaps the buffers unless they are kept.
func (b *readBuffers) release() {
	if !b.kept {
		unix.Munmap(b.mem)
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func latency(d time.Duration) uint32 {
	if d < 0 {
		return 0
	}
	if d > time.Duration(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(d)
}

// hangGrace is how long after a measurement's end its reads may take to
// complete at least (Job.Grace, which a probe scales with the disk's read
// time and the depth, is never shorter). A disk that does not answer (a
// dead nbd or iSCSI server) must not hold the probe for long: the probe
// then ends with ErrStuck, its restore left to finish when the disk
// answers (see restoreSlack in run.go).
const hangGrace = 500 * time.Millisecond

// ErrStuck is a measurement whose reads did not complete in time.
var ErrStuck = errors.New("the disk does not answer")

// ReadError is a read that failed or came back short.
type ReadError struct {
	Off int64
	Err error // an errno, or nil for a short read
	N   int
}

func (e *ReadError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("read at %d: %v", e.Off, e.Err)
	}
	return fmt.Sprintf("read at %d: %d bytes", e.Off, e.N)
}

func (e *ReadError) Unwrap() error { return e.Err }

// yieldEvery is how often a goroutine that issues reads yields
// (runtime.Gosched). The Go scheduler counts a goroutine that has not been
// rescheduled for 10 ms (forcePreemptNS in runtime/proc.go) as running too
// long, even when it spends that time in system calls: its monitor thread
// (sysmon) then takes the processor from under the goroutine's next system
// call, which finds it gone on return and must queue for one, and sysmon
// goes back to polling every 20 µs. On CPUs shared with the device's own
// thread that costs reads (contrib/bench/README.md, "probe against fio").
// A yield is a scheduling event: it restarts that clock. Half the
// runtime's limit, so a yield comes first.
const yieldEvery = 5 * time.Millisecond
