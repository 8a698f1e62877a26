package uevent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pilebones/go-udev/netlink"
)

// Reconnect backoff bounds: a broken socket is retried quickly at first,
// never less often than every maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Options say what a Monitor listens to.
type Options struct {
	Source Source
	// Dial opens the socket (Dial when nil).
	Dial Dialer
	// Log receives what the monitor does about socket trouble.
	Log *slog.Logger
	// Buffer is how many events may wait to be taken (default 1024).
	Buffer int
}

// Monitor owns a uevent socket and the goroutine that reads it. go-udev's
// monitor stops at the first socket error; this one never stops listening:
// ENOBUFS (a burst larger than the receive buffer) is passed on as a Lost
// event and the socket kept; any other socket error reopens the socket
// with backoff, then reports events Lost, since some may have come while
// no socket listened.
//
// Make it with Listen, start it with Start (or run it as a task with Run),
// end it with Close, which unblocks the reader and waits for it.
type Monitor struct {
	opts   Options
	events chan Event
	heard  atomic.Int64 // UnixNano of the last message, 0 before any
	ready  chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex // guards c, started and closed: Close runs on another goroutine
	c       Conn
	started bool
	closed  bool
}

// Listen opens the socket; the events flow once the monitor is started.
func Listen(opts Options) (*Monitor, error) {
	if opts.Dial == nil {
		opts.Dial = Dial
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 1024
	}
	c, err := opts.Dial(opts.Source.udevGroup())
	if err != nil {
		return nil, err
	}
	return &Monitor{opts: opts, c: c, events: make(chan Event, opts.Buffer), ready: make(chan struct{}), stop: make(chan struct{})}, nil
}

// Events delivers the events kept, in the order they came.
func (m *Monitor) Events() <-chan Event { return m.events }

// Heard is when the last message came (zero before any), whether or not
// it was kept: that the sender runs.
func (m *Monitor) Heard() time.Time {
	if t := m.heard.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

func (m *Monitor) String() string { return "uevent monitor (" + m.opts.Source.String() + ")" }

// Ready is closed once the monitor reads its socket.
func (m *Monitor) Ready() <-chan struct{} { return m.ready }

// Start starts reading, once; after Close it does nothing.
func (m *Monitor) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.closed {
		return
	}
	m.started = true
	m.wg.Add(1)
	go m.read()
	close(m.ready)
}

// Run is the monitor as a task: it starts it, and closes it when ctx is
// done (or Close was called), returning once the reader has.
func (m *Monitor) Run(ctx context.Context) error {
	m.Start()
	select {
	case <-ctx.Done():
	case <-m.stop:
	}
	return m.Close()
}

// Close stops the reader (a read in progress returns, a reconnect gives
// up), closes the socket and waits for the reader to end.
func (m *Monitor) Close() error {
	m.mu.Lock()
	var err error
	if !m.closed {
		m.closed = true
		close(m.stop)
		if err = m.c.Close(); errors.Is(err, os.ErrClosed) {
			err = nil // the reader closed it already, giving up on it
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	if err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	return nil
}

func (m *Monitor) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// read is the reader: until Close, it passes on the events kept.
func (m *Monitor) read() {
	defer m.wg.Done()
	log := m.opts.Log
	backoff := minBackoff
	for {
		msg, err := m.c.ReadMsg() // m.c changes only here (reconnect)
		if m.stopped() {
			return
		}
		switch {
		case err == nil:
			backoff = minBackoff
			now := time.Now()
			m.heard.Store(now.UnixNano())
			ev, ok, err := m.opts.Source.Parse(msg)
			ev.At = now
			if err != nil {
				log.Debug("unparsable uevent ignored", "error", err)
			}
			if ok && !m.send(ev) {
				return
			}
		case errors.Is(err, syscall.ENOBUFS):
			log.Warn("uevents were lost (socket receive buffer overflowed); rescanning every disk")
			if !m.send(Event{Lost: true}) {
				return
			}
		case errors.Is(err, netlink.ErrUntrustedSender):
			log.Warn("dropped a forged uevent", "error", err)
		case errors.Is(err, netlink.ErrTruncatedMessage):
			log.Warn("dropped an oversized uevent", "error", err)
		default:
			log.Error("uevent socket failed; reconnecting", "error", err)
			m.c.Close()
			if !m.reconnect(&backoff) {
				return
			}
			if !m.send(Event{Lost: true}) {
				return
			}
		}
	}
}

// reconnect opens a new socket, retrying with backoff, until it has one
// (true) or Close was called (false).
func (m *Monitor) reconnect(backoff *time.Duration) bool {
	for {
		t := time.NewTimer(*backoff)
		select {
		case <-m.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		*backoff = min(2**backoff, maxBackoff)
		c, err := m.opts.Dial(m.opts.Source.udevGroup())
		if err == nil {
			m.mu.Lock()
			if m.closed {
				m.mu.Unlock()
				c.Close()
				return false
			}
			m.c = c
			m.mu.Unlock()
			m.opts.Log.Info("uevent socket reconnected; rescanning every disk")
			return true
		}
		m.opts.Log.Error("uevent socket: reconnecting failed", "error", err, "retry_in", *backoff)
	}
}

func (m *Monitor) send(ev Event) bool {
	select {
	case m.events <- ev:
		return true
	case <-m.stop:
		return false
	}
}
