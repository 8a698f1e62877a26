package procs

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
)

// After a burst of blocking system calls, ReleaseThreads ends the threads
// the runtime made for it.
func TestReleaseThreads(t *testing.T) {
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.NsecToTimespec(50e6)
			syscall.Nanosleep(&ts, nil) // blocks its thread, as a scheduler switch does
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // as the daemon waits after a burst
	before := Threads()
	if before < 32 {
		t.Skipf("the runtime made only %d threads for 64 blocked calls", before)
	}
	ReleaseThreads()
	want := KeepThreads() + 4
	eventually.Within(time.Second, func() bool { return Threads() <= want }) // exiting threads take a moment to go
	if after := Threads(); after > want {
		t.Errorf("%d threads after the burst, %d after releasing, want at most %d", before, after, want)
	}
}
