package uevent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/ueventtest"
	"github.com/pilebones/go-udev/netlink"
)

// startMonitor runs a kernel monitor over the dialer's sockets until the
// test ends.
func startMonitor(t *testing.T, fd *fakeDialer) (<-chan Event, *ueventtest.LogBuffer) {
	t.Helper()
	log := &ueventtest.LogBuffer{}
	m, err := Listen(Options{Dial: fd.dial, Log: slog.New(slog.NewTextHandler(log, nil)), Buffer: 16})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m.Events(), log
}

func next(t *testing.T, events <-chan Event) Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return Event{}
	}
}

func TestMonitorENOBUFSMeansRescanAndKeepsTheSocket(t *testing.T) {
	t.Parallel()
	c := ueventtest.NewConn()
	fd := newFakeDialer(c)
	events, _ := startMonitor(t, fd)
	c.Msgs <- ueventtest.Msg{Err: fmt.Errorf("recvmsg: %w", syscall.ENOBUFS)}
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	if ev := next(t, events); !ev.Lost {
		t.Fatalf("after ENOBUFS got %+v, want a lost-events notice", ev)
	}
	if ev := next(t, events); ev.Name.String() != "loop20001" {
		t.Fatalf("after ENOBUFS got %+v, want the next event from the same socket", ev)
	}
	if fd.Count() != 1 {
		t.Errorf("dialed %d times; ENOBUFS must not reconnect", fd.Count())
	}
}

func TestMonitorReconnectsAfterSocketError(t *testing.T) {
	t.Parallel()
	first, second := ueventtest.NewConn(), ueventtest.NewConn()
	fd := newFakeDialer(first, second)
	events, _ := startMonitor(t, fd)
	first.Msgs <- ueventtest.Msg{Err: syscall.EBADF}
	if ev := next(t, events); !ev.Lost {
		t.Fatalf("after a socket error got %+v, want a lost-events notice (rescan)", ev)
	}
	second.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("change", "loop20002", "disk")}
	if ev := next(t, events); ev.Name.String() != "loop20002" {
		t.Fatalf("got %+v, want the event from the new socket", ev)
	}
	if fd.Count() != 2 {
		t.Errorf("dialed %d times, want 2", fd.Count())
	}
	select {
	case <-first.Closed():
	default:
		t.Error("the broken socket was not closed")
	}
}

func TestMonitorKeepsRetryingTheSocket(t *testing.T) {
	t.Parallel()
	c, later := ueventtest.NewConn(), ueventtest.NewConn()
	fd := newFakeDialer(c)
	events, _ := startMonitor(t, fd)
	c.Msgs <- ueventtest.Msg{Err: syscall.EBADF}
	// The first dial, then two that found no socket.
	waitFor(t, 5*time.Second, "two failed reconnects", func() bool { return fd.Count() >= 3 })
	fd.Add(later)
	if ev := next(t, events); !ev.Lost {
		t.Fatalf("got %+v, want a lost-events notice once reconnected", ev)
	}
}

func TestMonitorDropsForgedEvents(t *testing.T) {
	t.Parallel()
	c := ueventtest.NewConn()
	events, log := startMonitor(t, newFakeDialer(c))
	c.Msgs <- ueventtest.Msg{Err: fmt.Errorf("%w: kernel group message sent by pid 4242", netlink.ErrUntrustedSender)}
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20003", "disk")}
	if ev := next(t, events); ev.Name.String() != "loop20003" || ev.Lost {
		t.Fatalf("got %+v, want only the genuine event", ev)
	}
	// A WARN an admin must see, naming the sender: someone on the
	// machine forges uevents.
	if got := log.Lines("dropped a forged uevent"); len(got) != 1 || !strings.Contains(got[0], "pid 4242") {
		t.Errorf("log does not report the forged event with its sender:\n%s", log)
	}
}

// Close unblocks a reader waiting for a message and returns once it has
// ended, the socket closed.
func TestMonitorCloseUnblocksTheReader(t *testing.T) {
	t.Parallel()
	c := ueventtest.NewConn()
	m, err := Listen(Options{Dial: newFakeDialer(c).dial})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	<-m.Ready()
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return: the reader was not unblocked")
	}
	select {
	case <-c.Closed():
	default:
		t.Error("the socket is still open after Close")
	}
}

// Close ends a reconnect waiting out its backoff.
func TestMonitorCloseEndsAReconnect(t *testing.T) {
	t.Parallel()
	c := ueventtest.NewConn()
	fd := newFakeDialer(c)
	m, err := Listen(Options{Dial: fd.dial, Log: slog.New(slog.NewTextHandler(&ueventtest.LogBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	c.Msgs <- ueventtest.Msg{Err: syscall.EBADF}
	// The first dial, then one that found no socket.
	waitFor(t, 5*time.Second, "a failed reconnect", func() bool { return fd.Count() >= 2 })
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the reconnect's backoff")
	}
}

// As a task: Ready once reading, Run returns once ctx is done and the
// reader has ended; a message heard, kept or not, is when udevd last
// spoke.
func TestMonitorRunAsATask(t *testing.T) {
	t.Parallel()
	c := ueventtest.NewConn()
	m, err := Listen(Options{Source: UdevDone, Dial: newFakeDialer(c).dial})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	if !m.Heard().IsZero() {
		t.Error("heard before any message")
	}
	c.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("remove", "loop1", "disk")} // not kept
	c.Msgs <- ueventtest.Msg{B: ueventtest.UdevdMsg("change", "loop2", "disk")}
	if ev := next(t, m.Events()); ev.Name.String() != "loop2" || !ev.UdevDone {
		t.Errorf("got %+v, want loop2's change, udevd done", ev)
	}
	if m.Heard().IsZero() {
		t.Error("messages came, none heard")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case <-c.Closed():
	default:
		t.Error("the socket is still open after Run returned")
	}
}
