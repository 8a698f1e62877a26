package probe

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// uringEngine keeps Depth reads in flight on one io_uring, from one
// goroutine locked to its thread. It submits as fio does by default: each
// read with its own io_uring_enter as soon as its slot is free, and a wait
// for at least one completion only when no slot is. Submitting the reads
// freed by a wait together with the next wait, in one call, costs fewer
// system calls but hands them to the driver later, and the device reads
// less than under fio (contrib/bench/README.md, "probe against fio").
type uringEngine struct{}

// newUringEngine checks that the kernel lets this process set up a ring.
func newUringEngine() (Engine, error) {
	r, err := newRing(1)
	if err != nil {
		return nil, fmt.Errorf("io_uring is not available (kernel.io_uring_disabled, seccomp, or an old kernel): %w", err)
	}
	r.close()
	return uringEngine{}, nil
}

func (uringEngine) Name() string { return EngineIOUring }

func (uringEngine) Run(ctx context.Context, j *Job) (*Sample, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newRing(uint32(j.Depth))
	if err != nil {
		return nil, err
	}
	defer r.close()
	rb, err := alignedBuffers(j.Depth, j.BlockSize)
	if err != nil {
		return nil, err
	}
	defer rb.release()
	bufs := rb.bufs
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
	var lastDone time.Time // of the last read reaped
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
			err = r.enter(1, max(time.Until(j.stuckAt(lastDone)), time.Millisecond))
		}
		now = time.Now()
		if errors.Is(err, errWaitTimedOut) && now.Before(j.stuckAt(lastDone)) {
			err = nil // woken early: wait again
		}
		if err != nil {
			// Reads may still be in flight into the buffers: keep them
			// mapped (the ring's teardown cancels or waits for them).
			rb.keep()
			if errors.Is(err, errWaitTimedOut) {
				err = j.stuckError(inflight, lastDone)
			}
			return nil, err
		}
		r.reap(func(c uringCQE) {
			slot := int(c.userData)
			inflight--
			lastDone = now
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
