package uevent

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// udevd answers when something listens on its control socket; a socket
// file a udevd left behind, a missing one or one that is no socket does
// not answer. The listener hears the message that ends a conversation, so
// udevd logs nothing about the check.
func TestUdevdAnswers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	control := filepath.Join(dir, "control")
	if err := UdevdAnswers(control); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("no socket: %v, want ENOENT", err)
	}

	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: control, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	if err := UdevdAnswers(control); err != nil {
		t.Errorf("a listening socket: %v", err)
	}
	c, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1024)
	n, err := c.Read(msg)
	if err != nil {
		t.Fatal(err)
	}
	if n != udevCtrlMessageSize || binary.NativeEndian.Uint32(msg[16:]) != udevCtrlMagic || binary.NativeEndian.Uint32(msg[20:]) != 0 {
		t.Errorf("udevd got %d bytes %x, want an end-of-messages message", n, msg[:n])
	}
	c.Close()

	// udevd gone, its socket file left behind.
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(control); err != nil {
		t.Fatal(err)
	}
	if err := UdevdAnswers(control); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a stale socket file: %v, want ECONNREFUSED", err)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UdevdAnswers(plain); err == nil {
		t.Error("a plain file answers")
	}
}
