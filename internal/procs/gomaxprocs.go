// GOMAXPROCS is raised while work that needs more goroutines
// running at once is active, and put back after. GOMAXPROCS is the
// process's: only the process's owner (the daemon, a command) keeps a Raiser
// and hands its Raise to the libraries that ask (probe.Runner).

package procs

import (
	"os"
	"runtime"
	"sync"
)

// Raiser raises GOMAXPROCS for overlapping users. Each saving and
// restoring it on its own would, ended out of order, leave one user's
// raised value for the process's life. Here the first to start saves the
// value, later ones only raise it further, and the last to end puts the
// saved value back. The zero Raiser is ready; one process keeps one.
type Raiser struct {
	mu     sync.Mutex
	active int
	before int // GOMAXPROCS before the first active user
}

// Raise makes GOMAXPROCS at least want until the returned func is called
// (once).
func (r *Raiser) Raise(want int) (release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := runtime.GOMAXPROCS(0)
	if r.active == 0 {
		r.before = cur
	}
	r.active++
	if cur < want {
		runtime.GOMAXPROCS(want)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.active--
			if r.active == 0 && runtime.GOMAXPROCS(0) != r.before {
				runtime.GOMAXPROCS(r.before)
			}
		})
	}
}

// SetForDaemon lets the Go scheduler run twice as many goroutines at once as
// there are CPUs (unless GOMAXPROCS is set in the environment), for the
// daemon's process. Its work is system calls into sysfs, and a scheduler
// switch blocks its thread in the kernel; a goroutine blocked so keeps its P
// until sysmon takes it back (20 us to 10 ms later), so with one P per CPU
// the next disk's pass waits for sysmon, not for a CPU. With more Ps than
// CPUs the kernel's scheduler decides instead; many more is slower (idle Ps
// spin). Setting it stops Go from following later changes of the cgroup's
// CPU limit: the daemon keeps twice the limit it started with.
func SetForDaemon() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.SetDefaultGOMAXPROCS()
	runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
}
