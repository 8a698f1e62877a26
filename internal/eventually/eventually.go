// Package eventually is the tests' one way to wait for a condition that
// the code under test reaches on goroutines of its own and signals no
// other way (a file rewritten, a counter moved, a log line). A test that
// can wait on an event the code exposes (a channel, a hook, a counter the
// code bumps when done) waits on that instead, and a test never sleeps to
// show that something did not happen.
package eventually

import (
	"testing"
	"time"
)

// maxInterval bounds the time between two looks at the condition.
const maxInterval = 20 * time.Millisecond

// True returns once cond holds, looking at it every millisecond at first,
// then less often; it fails t when cond still does not hold after timeout,
// saying what it waited for.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Within reports whether cond held within timeout, looking at it as True
// does. For the tests that go on (or fail elsewhere) when it did not.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
	return true
}
