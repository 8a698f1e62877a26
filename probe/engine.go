package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Engine names.
const (
	EngineIOUring = "io_uring"
	EnginePsync   = "psync"
)

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

// NewEngine returns the engine named name ("" is io_uring when the kernel
// allows it, else psync).
func NewEngine(name string) (Engine, error) {
	switch name {
	case EnginePsync:
		return psyncEngine{}, nil
	case EngineIOUring, "":
		r, err := newRing(1)
		if err != nil {
			if name == "" {
				return psyncEngine{}, nil
			}
			return nil, fmt.Errorf("io_uring is not available (kernel.io_uring_disabled, seccomp, or an old kernel): %w", err)
		}
		r.close()
		return uringEngine{}, nil
	}
	return nil, fmt.Errorf("unknown engine %q: want %s or %s", name, EngineIOUring, EnginePsync)
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

// alignedBuffers maps n buffers of size bytes each, page aligned as
// O_DIRECT needs, outside the Go heap (the kernel writes them while no Go
// pointer may be watching).
func alignedBuffers(n, size int) ([]byte, [][]byte, error) {
	mem, err := unix.Mmap(-1, 0, n*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d read buffers: %w", n, err)
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return mem, bufs, nil
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
// complete. A disk that does not answer (a dead nbd or iSCSI server) must
// not hold the probe past its budget: the probe then ends with ErrStuck
// within a second of the budget, its restore left to finish when the disk
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

// uringEngine keeps Depth reads in flight on one io_uring, from one
// goroutine locked to its thread. It submits as fio does by default: each
// read with its own io_uring_enter as soon as its slot is free, and a wait
// for at least one completion only when no slot is. Submitting the reads
// freed by a wait together with the next wait, in one call, costs fewer
// system calls but hands them to the driver later, and the device reads
// less than under fio (contrib/bench/README.md, "probe against fio").
type uringEngine struct{}

func (uringEngine) Name() string { return EngineIOUring }

func (uringEngine) Run(ctx context.Context, j *Job) (*Sample, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newRing(uint32(j.Depth))
	if err != nil {
		return nil, err
	}
	defer r.close()
	mem, bufs, err := alignedBuffers(j.Depth, j.BlockSize)
	if err != nil {
		return nil, err
	}
	keepBuffers := false
	defer func() {
		if !keepBuffers {
			unix.Munmap(mem)
		}
	}()
	if !j.PlainBuffers {
		r.register(bufs)
	}

	next := j.offsets(0)
	s := &Sample{Latencies: make([]uint32, 0, 1<<16), WorkerRuns: workerRuns()}
	free := make([]int, j.Depth)
	for i := range free {
		free[i] = i
	}
	submitted := make([]time.Time, j.Depth)
	offs := make([]int64, j.Depth)
	inflight := 0
	more := true
	var firstErr error
	cpu0 := cpuTime()
	start := time.Now()
	now := start
	yielded := now
	for iter := 0; ; iter++ {
		if now.Sub(yielded) >= yieldEvery { // see yieldEvery
			runtime.Gosched()
			now = time.Now()
			yielded = now
		}
		if more && (now.After(j.Deadline) || firstErr != nil) {
			more = false
		}
		if more && iter&63 == 0 && ctx.Err() != nil {
			more = false
		}
		var err error
		for more && len(free) > 0 && err == nil {
			off, ok := next()
			if !ok {
				more = false
				break
			}
			slot := free[len(free)-1]
			free = free[:len(free)-1]
			offs[slot] = off
			r.queueRead(j.FD, bufs[slot], slot, off, uint64(slot))
			inflight++
			submitted[slot] = time.Now()
			if !j.SubmitWithWait {
				err = r.enter(0, 0)
			}
		}
		if inflight == 0 {
			break
		}
		if err == nil {
			// Past the limit, waits of a millisecond: what completed
			// is still reaped, and nothing waits for ever.
			err = r.enter(1, max(time.Until(j.Deadline.Add(hangGrace)), time.Millisecond))
		}
		now = time.Now()
		if errors.Is(err, errWaitTimedOut) && now.Before(j.Deadline.Add(hangGrace)) {
			err = nil // woken early: wait again
		}
		if err != nil {
			// Reads may still be in flight into the buffers: keep them
			// mapped (the ring's teardown cancels or waits for them).
			keepBuffers = true
			if errors.Is(err, errWaitTimedOut) {
				err = fmt.Errorf("%d reads did not complete within %s of the measurement's end: %w", inflight, hangGrace, ErrStuck)
			}
			return nil, err
		}
		r.reap(func(c uringCQE) {
			slot := int(c.userData)
			inflight--
			free = append(free, slot)
			if int(c.res) != j.BlockSize {
				if firstErr == nil {
					e := &ReadError{Off: offs[slot], N: int(c.res)}
					if c.res < 0 {
						e.Err, e.N = unix.Errno(-c.res), 0
					}
					firstErr = e
				}
				return
			}
			s.Reads++
			s.Latencies = append(s.Latencies, latency(now.Sub(submitted[slot])))
			if j.Check != nil {
				j.Check(offs[slot], bufs[slot])
			}
		})
	}
	s.Elapsed = now.Sub(start)
	s.CPU = cpuTime() - cpu0
	if w := workerRuns(); w >= 0 && s.WorkerRuns >= 0 {
		s.WorkerRuns = w - s.WorkerRuns
	} else {
		s.WorkerRuns = -1
	}
	return s, firstErr
}

// procsRaise raises GOMAXPROCS while psync runs are active. GOMAXPROCS is
// the process's, and probes of different disks run at once: each run
// saving and restoring it on its own would, ended out of order, leave
// one run's raised value for the daemon's life. Here the first run to
// start saves the value, later ones only raise it further, and the last
// to end puts the saved value back.
type procsRaise struct {
	mu     sync.Mutex
	active int
	before int // GOMAXPROCS before the first active run
}

// psyncProcs is package-level because GOMAXPROCS, which it guards, is
// process-wide.
var psyncProcs procsRaise

// raise makes GOMAXPROCS at least want until the returned func is called.
func (r *procsRaise) raise(want int) (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := runtime.GOMAXPROCS(0)
	if r.active == 0 {
		r.before = cur
	}
	r.active++
	if cur < want {
		runtime.GOMAXPROCS(want)
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.active--
		if r.active == 0 && runtime.GOMAXPROCS(0) != r.before {
			runtime.GOMAXPROCS(r.before)
		}
	}
}

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

// psyncEngine runs Depth goroutines, each doing one pread at a time, as
// fio's psync engine with numjobs does: a goroutine blocked in pread holds
// a thread while it waits, so the reads are as parallel as fio's threads.
// Readers are not locked to their threads, so their yields (yieldEvery)
// cost no thread switch.
type psyncEngine struct{}

func (psyncEngine) Name() string { return EnginePsync }

func (psyncEngine) Run(ctx context.Context, j *Job) (*Sample, error) {
	// Each reader returning from pread needs a P to time its read and
	// issue the next; with fewer Ps than readers they queue for one, and
	// the queueing is measured as the disk's latency (p99.9 of 29 ms
	// against 0.1 ms measured on a 2-CPU machine with 8 readers). fio's
	// threads have no such queue: give every reader a P for the run.
	defer psyncProcs.raise(j.Depth + 1)()
	mem, bufs, err := alignedBuffers(j.Depth, j.BlockSize)
	if err != nil {
		return nil, err
	}
	keepBuffers := false
	defer func() {
		if !keepBuffers {
			unix.Munmap(mem)
		}
	}()
	type result struct {
		reads int64
		lat   []uint32
		err   error
	}
	results := make([]result, j.Depth)
	var wg sync.WaitGroup
	var stop sync.Once
	stopped := make(chan struct{})
	halt := func() { stop.Do(func() { close(stopped) }) }
	defer halt()
	go func() {
		select {
		case <-ctx.Done():
			halt()
		case <-stopped:
		}
	}()
	cpu0 := cpuTime()
	start := time.Now()
	for w := 0; w < j.Depth; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[w]
			res.lat = make([]uint32, 0, 1<<13)
			buf := bufs[w]
			next := j.offsets(w)
			yielded := time.Now()
			for i := 0; ; i++ {
				if i&15 == 0 {
					select {
					case <-stopped:
						return
					default:
					}
				}
				off, ok := next()
				if !ok {
					return
				}
				t0 := time.Now()
				if t0.After(j.Deadline) {
					return
				}
				if t0.Sub(yielded) >= yieldEvery && !j.NoYield { // see yieldEvery
					runtime.Gosched()
					t0 = time.Now()
					yielded = t0
				}
				n, err := unix.Pread(j.FD, buf, off)
				if err == unix.EINTR {
					continue
				}
				t1 := time.Now()
				if err != nil || n != len(buf) {
					res.err = &ReadError{Off: off, Err: err, N: n}
					halt()
					return
				}
				res.reads++
				res.lat = append(res.lat, latency(t1.Sub(t0)))
				if j.Check != nil {
					j.Check(off, buf)
				}
			}
		}()
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Until(j.Deadline.Add(hangGrace))):
		// A reader is stuck in pread. It writes into its buffer and
		// results when (if) the read returns: leave both to it.
		halt()
		keepBuffers = true
		return nil, fmt.Errorf("reads did not complete within %s of the measurement's end: %w", hangGrace, ErrStuck)
	}
	s := &Sample{Elapsed: time.Since(start), CPU: cpuTime() - cpu0, WorkerRuns: -1}
	var errs []error
	for _, r := range results {
		s.Reads += r.reads
		s.Latencies = append(s.Latencies, r.lat...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) > 0 {
		return s, errs[0]
	}
	return s, nil
}
