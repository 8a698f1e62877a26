package probe

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/procs"
)

// The psync engine blocks one OS thread per read in flight. In a binary
// linked with cgo each thread the Go runtime starts is a pthread with
// glibc's default stack (RLIMIT_STACK's soft limit, 2 MiB when that is
// unlimited: nptl's __pthread_initialize_minimal, ARCH_STACK_DEFAULT_SIZE
// on x86-64), and each of the first 8 x CPUs threads to call malloc gets
// an arena of its own that reserves 64 MiB of address space (HEAP_MAX_SIZE
// on 64-bit; mallopt(3), M_ARENA_MAX). Under an address-space limit
// (RLIMIT_AS, ulimit -v) a thread that cannot be had is fatal: the runtime
// aborts the whole process (runtime/cgo: pthread_create failed), which no
// restore survives. So a psync probe checks the limit first and fails
// cleanly, saying what would fit.
const (
	// arenaReserve is what a glibc malloc arena reserves.
	arenaReserve = 64 << 20
	// arenasPerCPU: glibc's default arena cap is 8 per CPU on 64-bit.
	arenasPerCPU = 8
	// spareThreads are the threads beyond the readers the runtime may
	// start meanwhile (for its Ps, its monitor, a stat read).
	spareThreads = 4
	// addressSlack is room left for the heap the measurement grows.
	addressSlack = 64 << 20
	// goThreadStack is the address space a thread costs without cgo:
	// the runtime allocates its system stack itself.
	goThreadStack = 64 << 10
	// defaultPthreadStack is glibc's stack when RLIMIT_STACK is unlimited.
	defaultPthreadStack = 2 << 20
)

// threadSpace is what the process's address space needs for threads
// readers more, on top of cur threads now, with stack bytes a thread and
// ncpu CPUs (arenas only with cgo).
func threadSpace(cur, readers int, stack uint64, ncpu int, cgo bool) uint64 {
	n := readers + spareThreads
	if !cgo {
		return uint64(n) * goThreadStack
	}
	capArenas := arenasPerCPU * ncpu
	arenas := min(max(cur+n-1, 0), capArenas) - min(max(cur-1, 0), capArenas)
	return uint64(n)*(stack+uint64(os.Getpagesize())) + uint64(arenas)*arenaReserve
}

// pthreadStack is the stack glibc gives a thread by default.
func pthreadStack() uint64 {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_STACK, &l) != nil || l.Cur == unix.RLIM_INFINITY {
		return defaultPthreadStack
	}
	return l.Cur
}

// vmSize is the process's address space in use (VmSize), 0 when unknown.
func vmSize() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nVmSize:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	kb, _ := strconv.ParseUint(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(line), []byte("kB")))), 10, 64)
	return kb << 10
}

// checkAddressSpace fails a probe whose engine would start more threads
// than the process's address-space limit holds (see above): depth is the
// deepest it measures at.
func checkAddressSpace(engine string, depth int) error {
	if engine != EnginePsync {
		return nil
	}
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &l) != nil || l.Cur == unix.RLIM_INFINITY {
		return nil
	}
	used := vmSize()
	if used == 0 {
		return nil
	}
	return fitThreads(used, l.Cur, procs.Threads(), depth, pthreadStack(), runtime.NumCPU(), cgoThreads)
}

// fitThreads is checkAddressSpace's arithmetic: used bytes of limit in
// use, cur threads, readers depth.
func fitThreads(used, limit uint64, cur, depth int, stack uint64, ncpu int, cgo bool) error {
	need := threadSpace(cur, depth, stack, ncpu, cgo)
	if used+need+addressSlack <= limit {
		return nil
	}
	fits := 0
	for d := depth - 1; d >= 1; d-- {
		if used+threadSpace(cur, d, stack, ncpu, cgo)+addressSlack <= limit {
			fits = d
			break
		}
	}
	what := fmt.Sprintf("the psync engine starts a thread per read in flight, %d at depth %d, which need about %s of address space; the process may use %s (RLIMIT_AS, ulimit -v), of which %s are in use",
		depth, depth, mib(need), mib(limit), mib(used))
	fix := "use --engine io_uring (engine in [rule.probe]), or raise the limit to at least " + mib(used+need+addressSlack)
	if fits > 0 {
		fix = fmt.Sprintf("ask for depths up to %d (--depth and --depths, or depth and depths in [rule.probe]), ", fits) + fix
	}
	return fmt.Errorf("%s: %s", what, fix)
}

func mib(b uint64) string { return fmt.Sprintf("%d MiB", (b+(1<<20)-1)>>20) }
