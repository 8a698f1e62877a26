package daemon

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
)

// A burst of disks blocks one OS thread per disk in flight, each waiting in
// the kernel for a scheduler switch, and Go keeps every thread it ever made
// (each ~18 KiB resident), and the heap the burst used. Once the burst is
// over, the daemon ends the extra threads and gives their memory back, so
// that an idle daemon is as small after a burst as before it
// (contrib/bench/README.md has the measurements).

// keepThreads is what an idle daemon needs: GOMAXPROCS running threads,
// sysmon, the poller's thread, and a spare or two.
func keepThreads() int { return runtime.GOMAXPROCS(0) + 4 }

// releaseThreads ends idle OS threads beyond keepThreads. A goroutine that
// exits while locked to its thread takes the thread with it
// (runtime.LockOSThread), and its P goes to the next idle thread, which the
// next such goroutine ends.
func releaseThreads() {
	extra := threadCount() - keepThreads()
	if extra <= 0 {
		return
	}
	var wg sync.WaitGroup
	for range extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with us
		}()
	}
	wg.Wait()
	debug.FreeOSMemory()
}

// threadCount is the process's thread count, from /proc/self/status.
func threadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nThreads:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, _ := strconv.Atoi(string(bytes.TrimSpace(line)))
	return n
}

// SetProcs lets the Go scheduler run twice as many goroutines at once as
// there are CPUs (unless GOMAXPROCS is set in the environment), for the
// daemon's process. Its work is system calls into sysfs, and a scheduler
// switch blocks its thread in the kernel; a goroutine blocked so keeps its P
// until sysmon takes it back (20 us to 10 ms later), so with one P per CPU
// the next disk's pass waits for sysmon, not for a CPU. With more Ps than
// CPUs the kernel's scheduler decides instead; many more is slower (idle Ps
// spin). Setting it stops Go from following later changes of the cgroup's
// CPU limit: the daemon keeps twice the limit it started with.
func SetProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.SetDefaultGOMAXPROCS()
	runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
}
