package uevent

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/pilebones/go-udev/netlink"
)

// Conn is a uevent socket as a Monitor reads it. Dial opens the real one;
// a test's Conn hands over raw messages (ACTION=add\0DEVPATH=...) without
// a kernel.
type Conn interface {
	// ReadMsg blocks until a message arrives. A dropped message (forged
	// sender, truncated) is an error that leaves the socket usable;
	// ENOBUFS means the kernel dropped events; anything else means the
	// socket is broken.
	ReadMsg() ([]byte, error)
	// Close closes the socket and makes a ReadMsg in progress return.
	Close() error
}

// Dialer opens a uevent socket listening to the kernel (udev false) or to
// udevd's processed events (udev true).
type Dialer func(udev bool) (Conn, error)

// netlinkConn is the real socket: a non-blocking netlink socket on Go's
// runtime poller, so that a reader waiting for the next uevent costs no
// thread and no wake-ups, and Close unblocks it. The options are go-udev's
// (netlink/conn.go Connect): SO_PASSCRED, a 2 MiB receive buffer. Messages
// are received here rather than with go-udev's ReadMsg, which allocates 32
// KiB a message: 1000 disks appearing at once bring 2000 uevents, 64 MiB of
// garbage. The sender checks are go-udev's (checkSender), with its errors.
type netlinkConn struct {
	f    *os.File
	raw  syscall.RawConn
	buf  [16 << 10]byte // a uevent is at most 2 KiB (UEVENT_BUFFER_SIZE); udevd's at most 8 KiB
	oob  [128]byte      // room for SCM_CREDENTIALS
	nr   int
	oobn int
}

// receiveBuffer is the socket's receive buffer: a burst larger than this
// overflows it (ENOBUFS), and the Monitor reports events lost.
const receiveBuffer = 2 << 20

// Dial opens a netlink uevent socket on the kernel's group, or udevd's.
func Dial(udev bool) (Conn, error) {
	group := uint32(netlink.KernelEvent)
	if udev {
		group = uint32(netlink.UdevEvent)
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, syscall.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	fail := func(what string, err error) (Conn, error) {
		syscall.Close(fd)
		return nil, fmt.Errorf("uevent socket: %s: %w", what, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1); err != nil {
		return fail("SO_PASSCRED", err)
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max but needs CAP_NET_ADMIN.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, receiveBuffer); err != nil {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, receiveBuffer)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: group}); err != nil {
		return fail("bind", err)
	}
	// A non-blocking descriptor: os.NewFile puts it on the poller.
	f := os.NewFile(uintptr(fd), "uevent socket")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	return &netlinkConn{f: f, raw: raw}, nil
}

// ReadMsg returns the next message, valid until the next call. It waits on
// the poller; Close makes it return os.ErrClosed (wrapped).
func (n *netlinkConn) ReadMsg() ([]byte, error) {
	var (
		flags int
		from  syscall.Sockaddr
		rerr  error
	)
	err := n.raw.Read(func(fd uintptr) bool {
		for {
			n.nr, n.oobn, flags, from, rerr = syscall.Recvmsg(int(fd), n.buf[:], n.oob[:], 0)
			if !errors.Is(rerr, syscall.EINTR) {
				return !errors.Is(rerr, syscall.EAGAIN) // EAGAIN: wait for the poller
			}
		}
	})
	switch {
	case err != nil:
		return nil, err
	case rerr != nil:
		return nil, rerr
	case flags&syscall.MSG_TRUNC != 0:
		return nil, fmt.Errorf("%w: %d bytes read of a longer message", netlink.ErrTruncatedMessage, n.nr)
	case flags&syscall.MSG_CTRUNC != 0:
		return nil, fmt.Errorf("%w: its credentials were cut off", netlink.ErrUntrustedSender)
	}
	if err := checkSender(from, n.oob[:n.oobn]); err != nil {
		return nil, err
	}
	return n.buf[:n.nr], nil
}

// checkSender drops what only a forger sends, as libudev and go-udev do: a
// unicast message, one in the kernel's group from another port than the
// kernel's (0), one whose credentials name an unprivileged process. (The
// kernel's uid 0 reads as the overflow uid in a user namespace that does
// not map root, so only a non-root uid with a pid is refused.)
func checkSender(from syscall.Sockaddr, oob []byte) error {
	sender, ok := from.(*syscall.SockaddrNetlink)
	switch {
	case !ok:
		return fmt.Errorf("%w: not a netlink sender", netlink.ErrUntrustedSender)
	case sender.Groups == 0:
		return fmt.Errorf("%w: unicast message from port %d", netlink.ErrUntrustedSender, sender.Pid)
	case sender.Groups == uint32(netlink.KernelEvent) && sender.Pid != 0:
		return fmt.Errorf("%w: kernel group message from port %d", netlink.ErrUntrustedSender, sender.Pid)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("%w: %w", netlink.ErrUntrustedSender, err)
	}
	for i := range msgs {
		if msgs[i].Header.Level != syscall.SOL_SOCKET || msgs[i].Header.Type != syscall.SCM_CREDENTIALS {
			continue
		}
		cred, err := syscall.ParseUnixCredentials(&msgs[i])
		if err != nil {
			return fmt.Errorf("%w: %w", netlink.ErrUntrustedSender, err)
		}
		if cred.Pid != 0 && cred.Uid != 0 {
			return fmt.Errorf("%w: sent by pid %d as uid %d", netlink.ErrUntrustedSender, cred.Pid, cred.Uid)
		}
		return nil
	}
	return fmt.Errorf("%w: no credentials attached", netlink.ErrUntrustedSender)
}

// Close closes the socket, unblocking a reader.
func (n *netlinkConn) Close() error { return n.f.Close() }
