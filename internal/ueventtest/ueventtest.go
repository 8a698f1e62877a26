// Package ueventtest holds the fakes the tests of code that reads uevents
// share: a socket the test feeds, a dialer that hands such sockets out,
// messages in the kernel's and udevd's wire formats, and a buffer that
// collects a text log. It does not import package uevent, whose own tests
// use it: each test package adapts Dialer to uevent.Dialer in one line.
package ueventtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Msg is what one read of a Conn returns.
type Msg struct {
	B   []byte
	Err error
}

// Conn is a uevent socket fed by the test: each read returns the next Msg
// sent on Msgs, or ErrClosed once closed.
type Conn struct {
	Msgs      chan Msg
	closeOnce sync.Once
	closed    chan struct{}
}

// ErrClosed is a read of a closed Conn.
var ErrClosed = errors.New("fake socket closed")

// NewConn returns an open Conn, its Msgs buffered.
func NewConn() *Conn {
	return &Conn{Msgs: make(chan Msg, 64), closed: make(chan struct{})}
}

// ReadMsg returns the next message sent, or ErrClosed.
func (c *Conn) ReadMsg() ([]byte, error) {
	select {
	case m := <-c.Msgs:
		return m.B, m.Err
	case <-c.closed:
		return nil, ErrClosed
	}
}

// Close ends the reads; it may be called more than once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// Closed is closed once Close was called.
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Dialer hands out its conns in order, and counts the dials.
type Dialer struct {
	mu    sync.Mutex
	conns []*Conn
	dials int
}

// NewDialer returns a Dialer that hands out conns, then fails.
func NewDialer(conns ...*Conn) *Dialer { return &Dialer{conns: conns} }

// Add gives the dialer one more conn to hand out.
func (d *Dialer) Add(c *Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns = append(d.conns, c)
}

// Next is one dial: the next conn, or an error when none is left.
func (d *Dialer) Next() (*Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	if len(d.conns) == 0 {
		return nil, errors.New("no more fake sockets")
	}
	c := d.conns[0]
	d.conns = d.conns[1:]
	return c, nil
}

// Count is how many dials there were.
func (d *Dialer) Count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// KernelMsg is a kernel uevent of a block device as the socket delivers
// it.
func KernelMsg(action, name, devtype string) []byte {
	devpath := "/devices/virtual/block/" + name
	return fmt.Appendf(nil, "%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=block\x00DEVNAME=%s\x00DEVTYPE=%s\x00SEQNUM=1\x00",
		action, devpath, action, devpath, name, devtype)
}

// UdevdMsg is a processed event as udevd broadcasts it: libudev's header
// ("libudev\0", the magic 0xfeedcafe in network byte order, the header
// size and the properties' offset and length in host order), then
// NUL-terminated properties, extra ("KEY=value") last.
func UdevdMsg(action, name, devtype string, extra ...string) []byte {
	props := []byte("ACTION=" + action + "\x00DEVPATH=/devices/virtual/block/" + name + "\x00SUBSYSTEM=block\x00DEVNAME=/dev/" + name +
		"\x00DEVTYPE=" + devtype + "\x00MAJOR=7\x00MINOR=0\x00SEQNUM=9\x00ID_FOO=bar\x00")
	for _, e := range extra {
		props = append(props, e+"\x00"...)
	}
	const headerLength = 40
	h := make([]byte, headerLength)
	copy(h, "libudev\x00")
	binary.BigEndian.PutUint32(h[8:], 0xfeedcafe)
	binary.NativeEndian.PutUint32(h[12:], headerLength)
	binary.NativeEndian.PutUint32(h[16:], headerLength)
	binary.NativeEndian.PutUint32(h[20:], uint32(len(props)))
	return append(h, props...)
}

// LogBuffer collects a text log, safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the log lines containing every one of parts.
func (l *LogBuffer) Lines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// Without returns the log without the lines containing s.
func (l *LogBuffer) Without(s string) string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if !strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
