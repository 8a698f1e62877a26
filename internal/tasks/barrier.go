package tasks

import (
	"sync"
	"time"
)

// Barrier counts passes like a sync.WaitGroup, and can also be waited for
// with a deadline, leaving nothing behind: a caller must not wait forever
// for one pass stuck in the kernel (a write to a disk whose queue is frozen
// behind a dead nbd or iSCSI server), or everything behind it waits too.
// The zero Barrier is ready to use.
type Barrier struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0 while someone waits
}

// Add adds delta to the count.
func (b *Barrier) Add(delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += delta
	if b.n == 0 && b.zero != nil {
		close(b.zero)
		b.zero = nil
	}
}

// Done takes one from the count.
func (b *Barrier) Done() { b.Add(-1) }

// Wait returns once the count is zero.
func (b *Barrier) Wait() { b.WaitFor(0) }

// WaitFor returns true once the count is zero, or false after timeout (0:
// no timeout).
func (b *Barrier) WaitFor(timeout time.Duration) bool {
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
