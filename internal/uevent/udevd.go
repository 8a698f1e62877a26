package uevent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/iosched/iosched/internal/fileio"
)

// libudev's monitor header (systemd src/libsystemd/sd-device/device-monitor.c
// monitor_netlink_header): "libudev\0", a magic number in network byte
// order, then the header size and the properties' offset in host order.
const (
	udevdMagic        = 0xfeedcafe
	udevdHeaderLength = 40
)

// parseUdevd keeps an add or change of a whole disk from udevd's message.
// It reads only the properties it needs, in place: go-udev's ParseUEvent
// would build a map of all of them, kilobytes a disk in a burst.
// Properties are NUL-terminated KEY=value strings.
func parseUdevd(raw []byte) (Event, bool) {
	if !bytes.Contains(raw, []byte("SUBSYSTEM=block\x00")) || len(raw) < udevdHeaderLength ||
		!bytes.HasPrefix(raw, []byte("libudev\x00")) || binary.BigEndian.Uint32(raw[8:]) != udevdMagic {
		return Event{}, false
	}
	header := binary.NativeEndian.Uint32(raw[12:])
	off := binary.NativeEndian.Uint32(raw[16:])
	if header < udevdHeaderLength || header > uint32(len(raw)) || off < header || off >= uint32(len(raw)) {
		return Event{}, false
	}
	var v vars
	if v.scan(raw[off:], true) != nil || (v.action != "add" && v.action != "change") {
		return Event{}, false
	}
	ev, ok, err := v.diskEvent()
	if !ok || err != nil {
		return Event{}, false
	}
	ev.UdevDone = true
	return ev, true
}

// udevd's control protocol (systemd src/udev/udev-ctrl.c): one
// SOCK_SEQPACKET connection at a time, each message a fixed-size
// UdevCtrlMessageWire: char version[16], unsigned magic, an enum type, a
// union of an int and char buf[256]. Type 0 is _UDEV_CTRL_END_MESSAGES
// (UDEV_CTRL_UNKNOWN in older udevd), which udevd takes without a word and
// then closes the connection; an empty connection instead makes it log
// "Received message with invalid length".
const (
	udevCtrlMagic       = 0xdead1dea
	udevCtrlMessageSize = 16 + 4 + 4 + 256
)

// UdevdAnswers tells whether a udevd listens on its control socket
// (/run/udev/control): nil when a connection is taken. A socket file left
// behind by a udevd that is gone refuses (ECONNREFUSED), as does any file
// that is not a socket; a missing one is ENOENT. A udevd busy with another
// client (it takes one connection at a time, with no backlog) leaves the
// connection waiting (EAGAIN): it runs. It sends udevd the message that
// ends a conversation, so that udevd logs nothing.
func UdevdAnswers(control string) error {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("udevd control socket %s: %w", control, err)
	}
	defer syscall.Close(fd)
	err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: control})
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return nil
	case err != nil:
		return fmt.Errorf("udevd control socket %s: %w", control, err)
	}
	msg := make([]byte, udevCtrlMessageSize)
	copy(msg, "iosched")
	binary.NativeEndian.PutUint32(msg[16:], udevCtrlMagic)
	// Best effort: udevd answered by taking the connection.
	_ = syscall.Sendto(fd, msg, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, nil)
	return nil
}

// UdevProperties reads the properties udevd recorded for a block device
// (its database, /run/udev/data/b<major>:<minor>, "E:KEY=VALUE" lines), nil
// when it has none.
func UdevProperties(dir, majorMinor string) map[string]string {
	if majorMinor == "" {
		return nil
	}
	// udevd's database entries are a few hundred bytes; a FIFO or a link
	// to /dev/zero there must not hold up or swamp the disk's pass.
	b, err := fileio.Read(filepath.Join(dir, "b"+majorMinor), 1<<20)
	if err != nil {
		return nil
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if kv, ok := strings.CutPrefix(line, "E:"); ok {
			if k, v, ok := strings.Cut(kv, "="); ok {
				props[k] = v
			}
		}
	}
	return props
}
