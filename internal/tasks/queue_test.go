package tasks

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
)

// asks is the tests' job: every ask merged into one pass, in order.
type asks []int

func ask(n int) func(*asks) { return func(j *asks) { *j = append(*j, n) } }

// A burst of asks for a name whose pass runs makes exactly one more pass,
// which carries every ask of the burst, in order.
func TestQueueCoalescesABurstIntoOneMorePass(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var runs []asks
	q := NewQueue(8, func(name string, j asks) {
		mu.Lock()
		runs = append(runs, j)
		first := len(runs) == 1
		mu.Unlock()
		if first {
			<-release
		}
	})
	first := new(Barrier)
	q.Kick("disk", first, ask(0))
	eventually.True(t, 5*time.Second, "the first pass to start", func() bool { return len(q.Busy()) == 1 })
	burst := new(Barrier)
	for i := range 100 {
		q.Kick("disk", burst, ask(i+1))
	}
	close(release)
	first.Wait()
	burst.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2 {
		t.Fatalf("%d passes for one ask and a burst of 100 during it, want 2", len(runs))
	}
	if !slices.Equal(runs[0], asks{0}) {
		t.Errorf("first pass got %v, want [0]", runs[0])
	}
	if len(runs[1]) != 100 || runs[1][0] != 1 || runs[1][99] != 100 || !slices.IsSorted(runs[1]) {
		t.Errorf("second pass got %v, want the burst's 100 asks in order", runs[1])
	}
}

// Asks for a name that is queued but not started merge into that pass.
func TestQueueMergesIntoAQueuedPass(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	var mu sync.Mutex
	var runs []asks
	q := NewQueue(1, func(name string, j asks) {
		if name == "blocker" {
			<-block
			return
		}
		mu.Lock()
		runs = append(runs, j)
		mu.Unlock()
	})
	q.Kick("blocker", nil, ask(0)) // holds the only worker
	wg := new(Barrier)
	for i := range 3 {
		q.Kick("disk", wg, ask(i))
	}
	close(block)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 || !slices.Equal(runs[0], asks{0, 1, 2}) {
		t.Fatalf("passes %v, want one with every ask in order", runs)
	}
}

// Different names run in parallel, up to the limit; one name never runs
// twice at once. The first passes wait until limit of them run at once, so
// a queue that ran fewer would fail (at the 5 s bound), not pass by luck.
func TestQueueParallelAcrossNamesSerialWithinOne(t *testing.T) {
	t.Parallel()
	const limit = 4
	var now, peak atomic.Int32
	var perName sync.Map
	atLimit := make(chan struct{}) // closed when limit passes run at once
	var atLimitOnce sync.Once
	var idlePeak atomic.Int32
	q := NewQueue(limit, func(name string, j asks) {
		c, _ := perName.LoadOrStore(name, new(atomic.Int32))
		if c.(*atomic.Int32).Add(1) != 1 {
			t.Errorf("%s handled twice at once", name)
		}
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n == limit {
			atLimitOnce.Do(func() { close(atLimit) })
		}
		select {
		case <-atLimit:
		case <-time.After(5 * time.Second):
			atLimitOnce.Do(func() {
				t.Errorf("%d passes at once at most, with 6 names queued and a limit of %d", peak.Load(), limit)
				close(atLimit)
			})
		}
		now.Add(-1)
		c.(*atomic.Int32).Add(-1)
	})
	q.Idle = func(peak int) {
		if peak > limit {
			t.Errorf("Idle(%d), more workers than the limit, %d", peak, limit)
		}
		for {
			p := idlePeak.Load()
			if int32(peak) <= p || idlePeak.CompareAndSwap(p, int32(peak)) {
				break
			}
		}
	}
	wg := new(Barrier)
	for range 20 {
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			q.Kick(name, wg, ask(0))
		}
	}
	wg.Wait()
	if p := peak.Load(); p != limit {
		t.Errorf("peak parallelism %d, want the limit, %d", p, limit)
	}
	// Workers and slots go once the work is done: an idle queue holds
	// none. The last worker to end each time reports the peak since the
	// last report (the queue may go idle between kicks here too).
	eventually.True(t, 5*time.Second, "the queue to empty and report its peak", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.slots) == 0 && q.workers == 0 && q.pending == nil && idlePeak.Load() == limit
	})
}

// One name's passes run in the order asked: a pass asked while one runs
// starts only after it returned, and sees only the asks made after the
// running pass took its work.
func TestQueueOneNamesPassesInOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var runs []asks
	inPass := make(chan struct{})
	release := make(chan struct{})
	q := NewQueue(4, func(name string, j asks) {
		mu.Lock()
		runs = append(runs, j)
		mu.Unlock()
		inPass <- struct{}{}
		<-release
	})
	wg := new(Barrier)
	q.Kick("disk", wg, ask(1))
	<-inPass
	q.Kick("disk", wg, ask(2))
	q.Kick("disk", wg, ask(3))
	release <- struct{}{}
	<-inPass
	q.Kick("disk", wg, ask(4))
	release <- struct{}{}
	<-inPass
	release <- struct{}{}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if want := []asks{{1}, {2, 3}, {4}}; !slices.EqualFunc(runs, want, slices.Equal) {
		t.Errorf("passes %v, want %v", runs, want)
	}
}

// PassOver is closed at once when no pass runs, and when the running one
// returns otherwise, not before.
func TestQueuePassOver(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	q := NewQueue(1, func(name string, j asks) {
		close(started)
		<-release
	})
	select {
	case <-q.PassOver("disk"):
	default:
		t.Fatal("PassOver not closed with no pass running")
	}
	wg := new(Barrier)
	q.Kick("disk", wg, ask(0))
	<-started
	over := q.PassOver("disk")
	if q.PassOver("disk") != over {
		t.Error("two channels for one running pass")
	}
	select {
	case <-over:
		t.Fatal("PassOver closed while the pass runs")
	default:
	}
	select {
	case <-q.PassOver("other"):
	default:
		t.Error("PassOver of another name not closed")
	}
	if got := q.Busy(); !slices.Equal(got, []string{"disk"}) {
		t.Errorf("Busy() = %v, want [disk]", got)
	}
	close(release)
	<-over
	wg.Wait()
}

// Close releases waiters of passes that will not run, waits for the ones
// in flight, and makes later kicks do nothing.
func TestQueueClose(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{})
	var ran sync.Map
	q := NewQueue(1, func(name string, j asks) {
		ran.Store(name, true)
		if name == "slow" {
			close(started)
			<-release
		}
	})
	wg := new(Barrier)
	q.Kick("slow", wg, ask(0))
	<-started
	q.Kick("slow", wg, ask(1)) // owed behind the running pass
	q.Kick("never", wg, ask(0))
	done := q.Close()
	// The pass in flight waits for release, so done cannot be closed yet
	// unless Close did not wait for it.
	select {
	case <-done:
		t.Fatal("Close did not wait for the pass in flight")
	default:
	}
	// Close released the two passes that will not run, not the one
	// running.
	wg.mu.Lock()
	n := wg.n
	wg.mu.Unlock()
	if n != 1 {
		t.Errorf("barrier count %d after Close, want 1: the running pass's", n)
	}
	if n := q.Running(); n != 1 {
		t.Errorf("%d passes running after Close, want the one in flight", n)
	}
	close(release)
	<-done
	wg.Wait() // returns: "never" and slow's second pass were released without running
	q.Kick("after", wg, ask(0))
	wg.Wait()
	if _, ok := ran.Load("never"); ok {
		t.Error("a pass queued before Close ran after it")
	}
	if _, ok := ran.Load("after"); ok {
		t.Error("a pass asked after Close ran")
	}
	if n := q.Running(); n != 0 {
		t.Errorf("%d workers after Close's channel closed, want 0", n)
	}
}

// WaitFor gives up after its timeout, returns true at once on a zero
// count, and wakes every waiter when the count drops to zero.
func TestBarrierWaitFor(t *testing.T) {
	t.Parallel()
	var b Barrier
	if !b.WaitFor(time.Nanosecond) {
		t.Fatal("WaitFor on a zero count returned false")
	}
	b.Add(2)
	if b.WaitFor(time.Millisecond) {
		t.Fatal("WaitFor returned true with a count of 2")
	}
	woke := make(chan bool, 2)
	go func() { woke <- b.WaitFor(0) }()
	go func() { woke <- b.WaitFor(time.Minute) }()
	b.Done()
	b.Done()
	for range 2 {
		if !<-woke {
			t.Error("a waiter gave up once the count was zero")
		}
	}
	b.Add(1) // reusable after reaching zero
	go b.Done()
	b.Wait()
}
