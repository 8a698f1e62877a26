package daemon

import (
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// One answer to "does udevd run": something answers on its control
// socket (tried at most once a second), or an event
// heard lately. A socket file that nothing listens on (udevd gone) is no
// udevd.
func TestNoUdevd(t *testing.T) {
	t.Parallel()
	control := filepath.Join(t.TempDir(), "control")
	f := newUdevdFollower("", control, nil)
	if err := f.NoUdevd(); err == nil {
		t.Error("no control socket, nothing heard: udevd said to run")
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: control, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.NoUdevd(); err == nil {
		t.Error("tried again within a second: the last try not used")
	}
	f.control.Store(nil)
	if err := f.NoUdevd(); err != nil {
		t.Errorf("udevd listening: %v", err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	f.control.Store(nil)
	if err := f.NoUdevd(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the socket file of a udevd that is gone: %v, want ECONNREFUSED", err)
	}
	f.control.Store(nil)
	f.heard = time.Now
	if err := f.NoUdevd(); err != nil {
		t.Errorf("udevd's event just heard: %v", err)
	}
}

// A grace timer pending at stop is stopped and dropped, and none asked
// for after is armed: nothing is left to fire after Run.
func TestGraceTimersStopped(t *testing.T) {
	t.Parallel()
	var f Follower
	fired := make(chan string, 3)
	f.AfterGrace(time.Millisecond, func() { fired <- "before" })
	f.AfterGrace(time.Hour, func() { fired <- "pending" })
	if got := <-fired; got != "before" {
		t.Fatalf("fired %s first", got)
	}
	f.graceMu.Lock()
	pending := len(f.graces)
	f.graceMu.Unlock()
	if pending != 1 {
		t.Fatalf("%d grace timers pending, want the hour-long one", pending)
	}
	f.StopGraces()
	f.AfterGrace(time.Millisecond, func() { fired <- "after" })
	f.graceMu.Lock()
	left := len(f.graces)
	f.graceMu.Unlock()
	if left != 0 {
		t.Errorf("%d grace timers armed after StopGraces", left)
	}
	select {
	case got := <-fired:
		t.Errorf("%s fired after StopGraces", got)
	default:
	}
}
