package probe

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// psyncEngine runs Depth goroutines, each doing one pread at a time, as
// fio's psync engine with numjobs does: a goroutine blocked in pread holds
// a thread while it waits, so the reads are as parallel as fio's threads.
// Readers are not locked to their threads, so their yields (yieldEvery)
// cost no thread switch.
type psyncEngine struct{}

func newPsyncEngine() (Engine, error) { return psyncEngine{}, nil }

// psyncProcs: each reader returning from pread needs a P to time its read
// and issue the next; with fewer Ps than readers they queue for one, and
// the queueing is measured as the disk's latency, its tail most of all.
// fio's threads have
// no such queue: every reader wants a P, and one more for the rest of the
// process. GOMAXPROCS is the process's, so the engine does not set it: its
// caller is asked (Runner.Procs).
func psyncProcs(depth int) int { return depth + 1 }

func (psyncEngine) Name() string { return EnginePsync }

func (psyncEngine) Run(ctx context.Context, j *Job) (*Sample, error) {
	rb, err := alignedBuffers(j.Depth, j.BlockSize)
	if err != nil {
		return nil, err
	}
	defer rb.release()
	bufs := rb.bufs
	type result struct {
		reads int64
		lat   []uint32
		err   error
	}
	results := make([]result, j.Depth)
	// lastDone (Unix ns) is the last read completed past the deadline;
	// running counts the readers not yet returned.
	var lastDone, running atomic.Int64
	running.Store(int64(j.Depth))
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
			defer running.Add(-1)
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
				if t1.After(j.Deadline) { // the drain: see Job.Grace
					lastDone.Store(t1.UnixNano())
				}
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
wait:
	for {
		select {
		case <-waited:
			break wait
		case <-time.After(time.Until(j.stuckAt(time.Unix(0, lastDone.Load())))):
		}
		last := time.Unix(0, lastDone.Load())
		select {
		case <-waited:
			break wait
		default:
		}
		if time.Now().Before(j.stuckAt(last)) {
			continue // a read completed meanwhile
		}
		// A reader is stuck in pread. It writes into its buffer and
		// results when (if) the read returns: leave both to it.
		halt()
		rb.keep()
		return nil, j.stuckError(int(running.Load()), last)
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
