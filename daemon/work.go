package daemon

import (
	"sort"
	"sync"
	"time"

	"github.com/iosched/iosched/sysfs"
	"github.com/iosched/iosched/uevent"
)

// passKind says how much of a disk a pass reads.
type passKind int

const (
	// settingsOnly re-reads only the attributes the policy sets (and
	// writes those that drifted), trusting the facts (class, size, ...)
	// from the last full read: drift repair and re-planning after a
	// reload. Facts change only with a uevent.
	settingsOnly passKind = iota
	// full reads the whole disk afresh: a uevent, the first scan, a rescan
	// after lost events.
	full
)

// removal forgets a disk that sysfs says is gone. A "remove" uevent alone
// proves nothing: anyone can ask the kernel for one (`udevadm trigger
// --action=remove`, a write to the disk's uevent file), and one read late
// (after lost events) may be about the disk's predecessor. So the pass
// checks, and gives a disk still there a full pass instead.
const removal passKind = -1

// job is what is owed to one disk: the strongest kind asked for since its
// last pass started (a removal only when it came last), the newest udev
// properties, the disk's identity from the newest uevent, and who waits for
// it. A removal followed by an event is a full pass: the disk is back, or
// another one has its name, and the pass's read tells which.
type job struct {
	kind  passKind
	props map[string]string
	// ident is the device number and diskseq the newest uevent gave, so a
	// full pass need not read them; zero when a scan asked too (the scan
	// after lost events must read them afresh).
	ident sysfs.Ident
	// devpath is where the newest uevent says the disk's directory is
	// (uevent.Event.DevPath); "" when a scan asked too.
	devpath string
	// afterUdev: asked for by udevd's processed event; kernelEvent: by
	// the kernel's uevent (udevfollow.go).
	afterUdev, kernelEvent bool
	waiters                []*barrier
	// received is when the oldest uevent this pass answers arrived
	// (zero: none did), for the event-to-applied latency.
	received time.Time
}

func (j *job) merge(kind passKind, ev *uevent.Event, wg *barrier) {
	// The newer of a removal and an event wins.
	switch {
	case kind == removal:
		j.kind = removal
	case j.kind == removal && kind == full:
		j.kind = full
	case j.kind != removal:
		j.kind = max(j.kind, kind)
	}
	switch {
	case ev == nil:
		j.ident, j.devpath = sysfs.Ident{}, ""
	case ev.Props != nil:
		j.props = ev.Props
		fallthrough
	default:
		j.ident, j.devpath = ev.Ident, ev.DevPath
	}
	if ev != nil && !ev.UdevDone && !ev.At.IsZero() && (j.received.IsZero() || ev.At.Before(j.received)) {
		j.received = ev.At
	}
	j.afterUdev = j.afterUdev || ev != nil && ev.UdevDone
	j.kernelEvent = j.kernelEvent || ev != nil && !ev.UdevDone
	if wg != nil {
		wg.Add(1)
		j.waiters = append(j.waiters, wg)
	}
}

// slot is a disk with work queued or in progress. Disks with none have no
// slot, so the queue's size follows the work, not the machine.
type slot struct {
	queued bool // waiting in pending
	busy   bool // a pass is running
	next   job  // owed once the current pass (if any) is done
	dirty  bool // next was asked for while busy
	// over, made on demand, is closed when the running pass returns.
	over chan struct{}
}

// queue runs passes: different disks in parallel, up to limit at once, one
// disk's passes one after another, never two at once. Events for a disk
// already queued merge into the queued pass; events for a disk being handled
// make exactly one more pass, however many there were.
type queue struct {
	limit int
	run   func(name string, j job)
	// idle, when set, is called (without the lock) when the last worker
	// ends, with the most workers that ran at once since the last call.
	idle func(peak int)

	mu       sync.Mutex
	slots    map[string]*slot
	pending  []string
	workers  int
	peak     int
	closed   bool
	inFlight sync.WaitGroup
}

func newQueue(limit int, run func(string, job)) *queue {
	return &queue{limit: limit, run: run, slots: map[string]*slot{}}
}

// kick asks for a pass over name, for the uevent ev (nil: a scan). wg, when
// set, is done once a pass that started after this call has finished.
func (q *queue) kick(name string, kind passKind, ev *uevent.Event, wg *barrier) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	s := q.slots[name]
	if s == nil {
		s = &slot{next: job{kind: kind}}
		q.slots[name] = s
	}
	s.next.merge(kind, ev, wg)
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
// with the work: an idle daemon has none.
func (q *queue) work() {
	defer q.inFlight.Done()
	q.mu.Lock()
	for len(q.pending) > 0 && !q.closed {
		name := q.pending[0]
		q.pending[0] = ""
		q.pending = q.pending[1:]
		s := q.slots[name]
		j := s.next
		s.next, s.queued, s.busy = job{kind: settingsOnly}, false, true
		q.mu.Unlock()

		q.run(name, j)
		for _, wg := range j.waiters {
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
	if peak > 0 && q.idle != nil {
		q.idle(peak)
	}
}

// running is how many workers are running passes.
func (q *queue) running() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// busy lists the disks whose pass is running.
func (q *queue) busy() []string {
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

// passOver returns a channel closed once the pass of name running now, if
// any, has returned: its writes are done, its lock on the disk released. It
// is closed already when none runs. A probe waits on it (probe.go) so that
// it never switches a scheduler under a pass, nor keeps a pass from writing.
func (q *queue) passOver(name string) <-chan struct{} {
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

// close stops starting passes, releases whoever waits for the ones that will
// not run, and returns a channel closed once the passes in flight are done.
func (q *queue) close() <-chan struct{} {
	q.mu.Lock()
	q.closed = true
	for _, s := range q.slots {
		// A busy slot's running pass releases its own waiters; next
		// will never run.
		for _, wg := range s.next.waiters {
			wg.Done()
		}
		s.next.waiters = nil
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

// barrier counts passes like a sync.WaitGroup, and can also be waited for
// with a deadline, leaving nothing behind: a scan must not wait forever for
// one disk whose write hangs in the kernel (a queue frozen behind a dead nbd
// or iSCSI server), or every later scan, READY and reload would wait too.
type barrier struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0 while someone waits
}

func newBarrier() *barrier { return &barrier{} }

func (b *barrier) Add(delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += delta
	if b.n == 0 && b.zero != nil {
		close(b.zero)
		b.zero = nil
	}
}

func (b *barrier) Done() { b.Add(-1) }

// Wait returns once the count is zero.
func (b *barrier) Wait() { b.WaitFor(0) }

// WaitFor returns true once the count is zero, or false after timeout (0:
// no timeout).
func (b *barrier) WaitFor(timeout time.Duration) bool {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return true
	}
	if b.zero == nil {
		b.zero = make(chan struct{})
	}
	zero := b.zero
	b.mu.Unlock()
	if timeout <= 0 {
		<-zero
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-zero:
		return true
	case <-t.C:
		return false
	}
}
