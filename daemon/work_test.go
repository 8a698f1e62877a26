package daemon

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iosched/iosched/sysfs"
	"github.com/iosched/iosched/uevent"
)

// A burst of events for a disk being handled makes exactly one more pass.
func TestQueueCoalescesABurstIntoOneMorePass(t *testing.T) {
	release := make(chan struct{})
	var passes atomic.Int32
	q := newQueue(8, func(name string, j job) {
		if passes.Add(1) == 1 {
			<-release
		}
	})
	first := newBarrier()
	q.kick("loop20000", full, nil, first)
	waitFor(t, 5*time.Second, "the first pass to start", func() bool { return passes.Load() == 1 })
	burst := newBarrier()
	for range 100 {
		q.kick("loop20000", full, nil, burst)
	}
	close(release)
	first.Wait()
	burst.Wait()
	if n := passes.Load(); n != 2 {
		t.Fatalf("%d passes for one event and a burst of 100 during it, want 2", n)
	}
}

// Events for a disk that is queued but not started merge into that pass.
func TestQueueMergesIntoAQueuedPass(t *testing.T) {
	block := make(chan struct{})
	var mu sync.Mutex
	var runs []job
	q := newQueue(1, func(name string, j job) {
		if name == "blocker" {
			<-block
			return
		}
		mu.Lock()
		runs = append(runs, j)
		mu.Unlock()
	})
	q.kick("blocker", full, nil, nil) // holds the only worker
	wg := newBarrier()
	q.kick("loop20000", settingsOnly, nil, wg)
	q.kick("loop20000", full, &uevent.Event{Props: map[string]string{"ID_BUS": "ata"}}, wg)
	q.kick("loop20000", settingsOnly, nil, wg)
	close(block)
	wg.Wait()
	if len(runs) != 1 {
		t.Fatalf("%d passes, want 1", len(runs))
	}
	if runs[0].kind != full || runs[0].props["ID_BUS"] != "ata" {
		t.Errorf("merged pass = %+v, want a full one with the newest properties", runs[0])
	}
}

// Different disks run in parallel, up to the limit; one disk never runs
// twice at once. The first passes wait until limit of them run at once, so
// a queue that ran fewer would fail (at the 5 s bound), not pass by luck.
func TestQueueParallelAcrossDisksSerialWithinOne(t *testing.T) {
	const limit = 4
	var now, peak atomic.Int32
	var perDisk sync.Map
	atLimit := make(chan struct{}) // closed when limit passes run at once
	var atLimitOnce sync.Once
	q := newQueue(limit, func(name string, j job) {
		c, _ := perDisk.LoadOrStore(name, new(atomic.Int32))
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
				t.Errorf("%d passes at once at most, with 6 disks queued and a limit of %d", peak.Load(), limit)
				close(atLimit)
			})
		}
		now.Add(-1)
		c.(*atomic.Int32).Add(-1)
	})
	wg := newBarrier()
	for range 20 {
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			q.kick(name, full, nil, wg)
		}
	}
	wg.Wait()
	if p := peak.Load(); p != limit {
		t.Errorf("peak parallelism %d, want the limit, %d", p, limit)
	}
	// Workers and slots go once the work is done: an idle daemon holds none.
	waitFor(t, 5*time.Second, "the queue to empty", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.slots) == 0 && q.workers == 0
	})
}

// close releases waiters of passes that will not run and waits for the
// ones in flight.
func TestQueueClose(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	q := newQueue(1, func(name string, j job) {
		if name == "slow" {
			close(started)
			<-release
		}
	})
	wg := newBarrier()
	q.kick("slow", full, nil, wg)
	<-started
	q.kick("never", full, nil, wg)
	done := q.close()
	// The pass in flight waits for release, so done cannot be closed yet
	// unless close did not wait for it.
	select {
	case <-done:
		t.Fatal("close did not wait for the pass in flight")
	default:
	}
	if n := q.running(); n != 1 {
		t.Errorf("%d passes running after close, want the one in flight", n)
	}
	close(release)
	<-done
	wg.Wait() // returns: "never" was released without running
	q.kick("after", full, nil, wg)
	wg.Wait()
}

// A removal forgets; an event after it (the disk is back, or another one
// under its name) wins over it; a rescan's settingsOnly does not.
func TestQueueRemovalMerging(t *testing.T) {
	tests := []struct {
		kicks []passKind
		want  passKind
	}{
		{[]passKind{full, removal}, removal},
		{[]passKind{removal, full}, full},
		{[]passKind{removal, full, settingsOnly}, full},
		{[]passKind{removal, settingsOnly}, removal},
		{[]passKind{settingsOnly, full, settingsOnly}, full},
		{[]passKind{removal}, removal},
	}
	for _, tt := range tests {
		block := make(chan struct{})
		var got []passKind
		q := newQueue(1, func(name string, j job) {
			if name == "blocker" {
				<-block
				return
			}
			got = append(got, j.kind)
		})
		q.kick("blocker", full, nil, nil)
		wg := newBarrier()
		for _, k := range tt.kicks {
			q.kick("loop20000", k, nil, wg)
		}
		close(block)
		wg.Wait()
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("kicks %v: passes %v, want one of kind %v", tt.kicks, got, tt.want)
		}
	}
}

// A merged pass takes the identity of the newest uevent, and none when a
// scan asked for it too: the scan after lost events reads it afresh.
func TestJobMergeIdent(t *testing.T) {
	a := &uevent.Event{Ident: sysfs.Ident{MajorMinor: "7:1", DiskSeq: "1"}}
	b := &uevent.Event{Ident: sysfs.Ident{MajorMinor: "7:1", DiskSeq: "2"}}
	var j job
	j.merge(full, a, nil)
	j.merge(removal, &uevent.Event{}, nil)
	j.merge(full, b, nil)
	if j.ident != b.Ident || j.kind != full {
		t.Errorf("after add, remove, add: %+v, want the second disk's identity, a full pass", j)
	}
	j.merge(full, nil, nil)
	if j.ident != (sysfs.Ident{}) {
		t.Errorf("after a scan: identity %+v, want none", j.ident)
	}
}
