// Writes records the writes to a disk's settings that run on a
// goroutine of their own because nobody can wait for them to return.
//
// A write to queue/scheduler (or to a tunable that freezes the queue)
// waits in the kernel for every request in flight on the disk
// (block/elevator.c: the queue is frozen and quiesced for the switch); on
// a disk that stopped answering, a dead nbd or iSCSI server, that is
// until it answers again, and a write in the kernel cannot be cancelled.
// A caller that has to go on (a probe within its budget, a stop within its
// timeout) leaves such a write to finish on its own. Writes keeps every
// one of them by disk until it returns, so the daemon's state can say a
// disk still has a write in flight and a stop can name what it left.

package tasks

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Write is one write in flight.
type Write struct {
	Disk string
	// What is written, as a log says it: "restore", "scheduler mq-deadline".
	What  string
	Since time.Time
}

// Writes is a record of writes in flight, safe for concurrent use. A nil
// *Writes records nothing, and its Go still runs the write.
type Writes struct {
	// changed, when set, is called (without the lock) after a write is
	// recorded or forgotten.
	changed func()

	mu     sync.Mutex
	next   uint64
	writes map[uint64]Write
}

// New returns an empty record; changed, when not nil, is called whenever a
// write starts or ends (the daemon rewrites its state file).
func NewWrites(changed func()) *Writes {
	return &Writes{changed: changed, writes: map[uint64]Write{}}
}

// Go runs write on a goroutine of its own, recorded under disk as what
// until it returns. A caller may stop waiting for it at any time.
func (w *Writes) Go(disk, what string, write func() error) *Started {
	s := &Started{done: make(chan struct{})}
	forget := w.Add(disk, what)
	go func() {
		s.err = write()
		forget()
		close(s.done)
	}()
	return s
}

// Started is a write Go runs.
type Started struct {
	done chan struct{}
	err  error
}

// Done is closed once the write has returned and is no longer listed.
func (s *Started) Done() <-chan struct{} { return s.done }

// Err is the write's error, once Done is closed.
func (s *Started) Err() error {
	<-s.done
	return s.err
}

// Add records a write under disk, as what, that runs elsewhere (on a
// goroutine the caller does not own, such as apply's); call done once it
// has returned. done may be called more than once.
func (w *Writes) Add(disk, what string) (done func()) {
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	w.next++
	id := w.next
	w.writes[id] = Write{Disk: disk, What: what, Since: time.Now()}
	w.mu.Unlock()
	w.notify()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			delete(w.writes, id)
			w.mu.Unlock()
			w.notify()
		})
	}
}

func (w *Writes) notify() {
	if w.changed != nil {
		w.changed()
	}
}

// All lists the writes in flight, by disk, oldest first within a disk.
func (w *Writes) All() []Write {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	out := make([]Write, 0, len(w.writes))
	for _, wr := range w.writes {
		out = append(out, wr)
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b Write) int {
		return cmp.Or(cmp.Compare(a.Disk, b.Disk), a.Since.Compare(b.Since), cmp.Compare(a.What, b.What))
	})
	return out
}

// Of lists the disk's writes in flight, oldest first.
func (w *Writes) Of(disk string) []Write {
	return slices.DeleteFunc(w.All(), func(wr Write) bool { return wr.Disk != disk })
}
