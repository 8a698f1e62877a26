// A Queue runs work owed to named things (a daemon's disks):
// different names in parallel, up to a bound, one name's passes one after
// another and never two at once. What is asked for a name while it waits,
// or while its pass runs, merges into the one pass owed next, so a burst of
// asks makes at most one more pass, however many there were.

package tasks

import (
	"sort"
	"sync"
)

// slot is a name with work queued or in progress. Names with none have no
// slot, so the queue's size follows the work, not the number of names.
type slot[J any] struct {
	queued  bool // waiting in pending
	busy    bool // a pass is running
	next    J    // owed once the current pass (if any) is done
	waiters []*Barrier
	dirty   bool // next was asked for while busy
	// over, made on demand, is closed when the running pass returns.
	over chan struct{}
}

// Queue runs passes of run: different names in parallel, up to limit at
// once, one name's passes one after another. The work owed to a name is a
// J, the zero J at first and after each pass starts, changed by the merge
// function of every Kick until its pass takes it.
type Queue[J any] struct {
	limit int
	run   func(name string, job J)
	// Idle, when set (before the first Kick), is called without the
	// queue's lock when the last worker ends, with the most workers that
	// ran at once since the last call.
	Idle func(peak int)

	mu       sync.Mutex
	slots    map[string]*slot[J]
	pending  []string
	workers  int
	peak     int
	closed   bool
	inFlight sync.WaitGroup
}

// New returns a queue that runs up to limit passes at once.
func NewQueue[J any](limit int, run func(name string, job J)) *Queue[J] {
	return &Queue[J]{limit: limit, run: run, slots: map[string]*slot[J]{}}
}

// Kick asks for a pass over name: merge, called with the queue's lock
// held, folds the ask into the work owed to name. wg, when set, is done
// once a pass that started after this call has returned (or, after Close,
// once that pass is known never to run). After Close, Kick does nothing.
func (q *Queue[J]) Kick(name string, wg *Barrier, merge func(owed *J)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	s := q.slots[name]
	if s == nil {
		s = &slot[J]{}
		q.slots[name] = s
	}
	merge(&s.next)
	if wg != nil {
		wg.Add(1)
		s.waiters = append(s.waiters, wg)
	}
	switch {
	case s.busy:
		s.dirty = true
	case !s.queued:
		s.queued = true
		q.pending = append(q.pending, name)
		if q.workers < q.limit {
			q.workers++
			q.peak = max(q.peak, q.workers)
			q.inFlight.Add(1)
			go q.work()
		}
	}
}

// work runs pending passes until there are none left. Workers come and go
// with the work: an idle queue has none.
func (q *Queue[J]) work() {
	defer q.inFlight.Done()
	var zero J
	q.mu.Lock()
	for len(q.pending) > 0 && !q.closed {
		name := q.pending[0]
		q.pending[0] = ""
		q.pending = q.pending[1:]
		s := q.slots[name]
		j, waiters := s.next, s.waiters
		s.next, s.waiters, s.queued, s.busy = zero, nil, false, true
		q.mu.Unlock()

		q.run(name, j)
		for _, wg := range waiters {
			wg.Done()
		}

		q.mu.Lock()
		s.busy = false
		if s.over != nil {
			close(s.over)
			s.over = nil
		}
		if s.dirty {
			s.dirty, s.queued = false, true
			q.pending = append(q.pending, name)
		} else {
			delete(q.slots, name)
		}
	}
	if len(q.pending) == 0 {
		q.pending = nil // let a burst's backing array go
	}
	q.workers--
	peak := 0
	if q.workers == 0 {
		peak, q.peak = q.peak, 0
	}
	q.mu.Unlock()
	if peak > 0 && q.Idle != nil {
		q.Idle(peak)
	}
}

// Running is how many workers are running passes.
func (q *Queue[J]) Running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// Busy lists, sorted, the names whose pass is running.
func (q *Queue[J]) Busy() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var names []string
	for name, s := range q.slots {
		if s.busy {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// PassOver returns a channel closed once the pass over name running now,
// if any, has returned; closed already when none runs. Work that must
// never overlap a pass waits on it.
func (q *Queue[J]) PassOver(name string) <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.slots[name]
	if s == nil || !s.busy {
		return alreadyClosed
	}
	if s.over == nil {
		s.over = make(chan struct{})
	}
	return s.over
}

// alreadyClosed is a channel closed from the start.
var alreadyClosed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Close stops starting passes, releases whoever waits for the ones that
// will not run, and returns a channel closed once the passes in flight are
// done.
func (q *Queue[J]) Close() <-chan struct{} {
	q.mu.Lock()
	q.closed = true
	for _, s := range q.slots {
		// A busy slot's running pass releases its own waiters; next
		// will never run.
		for _, wg := range s.waiters {
			wg.Done()
		}
		s.waiters = nil
	}
	q.pending = nil
	q.mu.Unlock()
	done := make(chan struct{})
	go func() {
		q.inFlight.Wait()
		close(done)
	}()
	return done
}
