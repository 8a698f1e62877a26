// Package procs keeps the process's share of the machine in bounds: it ends
// the OS threads a burst of blocking system calls left behind and gives
// their memory back, so an idle daemon is as small after a burst as before
// it (threads.go), and raises GOMAXPROCS only while work needs it
// (gomaxprocs.go).
package procs

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
// (each resident), and the heap the burst used
// (contrib/bench/README.md has the measurements).

// KeepThreads is how many threads an idle daemon needs: GOMAXPROCS running threads,
// sysmon, the poller's thread, and a spare or two.
func KeepThreads() int { return runtime.GOMAXPROCS(0) + 4 }

// ReleaseThreads ends idle OS threads beyond KeepThreads. A goroutine that
// exits while locked to its thread takes the thread with it
// (runtime.LockOSThread), and its P goes to the next idle thread, which the
// next such goroutine ends.
func ReleaseThreads() {
	extra := Threads() - KeepThreads()
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

// Threads is the process's thread count, from /proc/self/status.
func Threads() int {
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
