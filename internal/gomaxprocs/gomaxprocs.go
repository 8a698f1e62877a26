// Package gomaxprocs raises runtime.GOMAXPROCS while work that needs more
// goroutines running at once is active, and puts it back after. GOMAXPROCS
// is the process's: only the process's owner (the daemon, a command) keeps
// a Raiser and hands its Raise to the libraries that ask (probe.Runner).
package gomaxprocs

import (
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
