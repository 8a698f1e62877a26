package eventually

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestWithin: a condition met after a few looks is seen; one never met is
// given up on after the timeout, not before.
func TestWithin(t *testing.T) {
	t.Parallel()
	var looks atomic.Int32
	if !Within(5*time.Second, func() bool { return looks.Add(1) >= 3 }) {
		t.Fatal("a condition that held at the third look was not seen")
	}
	start := time.Now()
	if Within(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never held was reported met")
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("gave up after %s, before the 30ms timeout", took)
	}
}

// TestTrueFails: True fails the test, naming what it waited for.
func TestTrueFails(t *testing.T) {
	t.Parallel()
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine, as it does a test's
		defer close(done)
		True(ft, 10*time.Millisecond, "the moon", func() bool { return false })
	}()
	<-done
	if ft.msg != "timed out after 10ms waiting for the moon" {
		t.Errorf("failure message %q", ft.msg)
	}
}

type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
