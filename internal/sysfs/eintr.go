package sysfs

import "golang.org/x/sys/unix"

// retryEINTR calls fn again for as long as it fails with EINTR. A system
// call on sysfs interrupted by a signal (Go preempts goroutines with
// SIGURG) did nothing and is simply made again.
func retryEINTR[T any](fn func() (T, error)) (T, error) {
	for {
		v, err := fn()
		if err != unix.EINTR {
			return v, err
		}
	}
}
