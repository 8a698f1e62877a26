package uevent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/iosched/iosched/internal/eventually"
)

// fakeConn is a uevent socket fed by the test.
type fakeConn struct {
	msgs      chan fakeMsg
	closeOnce sync.Once
	closed    chan struct{}
}

type fakeMsg struct {
	b   []byte
	err error
}

var errFakeClosed = errors.New("fake socket closed")

func newFakeConn() *fakeConn {
	return &fakeConn{msgs: make(chan fakeMsg, 64), closed: make(chan struct{})}
}

func (f *fakeConn) ReadMsg() ([]byte, error) {
	select {
	case m := <-f.msgs:
		return m.b, m.err
	case <-f.closed:
		return nil, errFakeClosed
	}
}

func (f *fakeConn) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

// fakeDialer hands out the conns in order, and counts the dials.
type fakeDialer struct {
	mu    sync.Mutex
	conns []*fakeConn
	dials int
}

func (f *fakeDialer) dial(udev bool) (Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if len(f.conns) == 0 {
		return nil, errors.New("no more fake sockets")
	}
	c := f.conns[0]
	f.conns = f.conns[1:]
	return c, nil
}

func (f *fakeDialer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// kernelMsg is a kernel uevent as the socket delivers it.
func kernelMsg(action, name, devtype string) []byte {
	devpath := "/devices/virtual/block/" + name
	return fmt.Appendf(nil, "%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=block\x00DEVNAME=%s\x00DEVTYPE=%s\x00SEQNUM=1\x00",
		action, devpath, action, devpath, name, devtype)
}

// udevdMsg is a processed event as udevd broadcasts it: libudev's header,
// then NUL-terminated properties.
func udevdMsg(action, name, devtype string, extra ...string) []byte {
	props := []byte("ACTION=" + action + "\x00DEVPATH=/devices/virtual/block/" + name + "\x00SUBSYSTEM=block\x00DEVNAME=/dev/" + name +
		"\x00DEVTYPE=" + devtype + "\x00MAJOR=7\x00MINOR=0\x00SEQNUM=9\x00ID_FOO=bar\x00")
	for _, e := range extra {
		props = append(props, e+"\x00"...)
	}
	h := make([]byte, udevdHeaderLength)
	copy(h, "libudev\x00")
	binary.BigEndian.PutUint32(h[8:], udevdMagic)
	binary.NativeEndian.PutUint32(h[12:], udevdHeaderLength)
	binary.NativeEndian.PutUint32(h[16:], udevdHeaderLength)
	binary.NativeEndian.PutUint32(h[20:], uint32(len(props)))
	return append(h, props...)
}

// logBuffer collects a text log, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines containing s.
func (l *logBuffer) lines(s string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if line != "" && strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// waitFor is eventually.True, by the name this package's tests know it.
var waitFor = eventually.True
