package daemon

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
)

// A burst of disks blocks one OS thread per disk in flight, each waiting
// ~25 ms in the kernel for a scheduler switch, and Go keeps every thread it
// ever made: after 1000 disks appeared at once, ~140-200 idle threads stay,
// ~18 KiB resident each (200 threads blocked in nanosleep, then idle: +3.6
// MiB), and so does the heap the burst used. Once the burst is over, end the
// extra threads and give their memory back. Measured with contrib/bench (1000
// loops at once, VmRSS a second after the last burst): 11.5 MiB and 8
// threads; with FreeOSMemory alone 13.8 MiB and 140; with neither 18.1 MiB
// and 203 threads, still so 12 s later.

// keepThreads is what an idle daemon needs: GOMAXPROCS running threads,
// sysmon, the uevent reader blocked in recvmsg, and a spare or two.
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
// switch blocks its thread ~25 ms in the kernel; a goroutine blocked so
// keeps its P until sysmon takes it back (20 us to 10 ms later), so with one
// P per CPU the next disk's pass waits for sysmon, not for a CPU. With more
// Ps than CPUs the kernel's scheduler decides instead. 1000 loops at once
// on 2 vCPUs, six rounds alternating: 192 disks at once took 0.22-0.26 s
// with 4 Ps against 0.24-0.31 s with 2 (256 at once: 0.21-0.25 against
// 0.25-0.28); 32 Ps was slower than 2 (idle Ps spin). Setting it stops Go
// from following later changes of the cgroup's CPU limit: the daemon keeps
// twice the limit it started with.
func SetProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.SetDefaultGOMAXPROCS()
	runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
}
