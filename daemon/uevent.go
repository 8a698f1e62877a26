package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pilebones/go-udev/netlink"

	"github.com/iosched/iosched/sysfs"
)

// conn is the uevent socket as the daemon uses it, so tests can feed raw
// messages without a kernel.
type conn interface {
	// ReadMsg blocks until a message arrives. A dropped message (forged
	// sender, truncated) is an error that leaves the socket usable;
	// ENOBUFS means the kernel dropped events; anything else means the
	// socket is broken.
	ReadMsg() ([]byte, error)
	Close() error
}

// dialer opens a uevent socket listening to the kernel (udev false) or to
// udevd's processed events (udev true).
type dialer func(udev bool) (conn, error)

// event is a uevent about a whole disk, or the news that events were lost.
type event struct {
	action string // add, change, remove
	name   string // the kernel name, as in /sys/block
	// props are the udev properties, in udev mode only.
	props map[string]string
	// ident is the disk's MAJOR:MINOR and DISKSEQ (when the kernel sends
	// it); empty when the event lacks MAJOR or MINOR.
	ident sysfs.Ident
	// lost: events may have been dropped, so every disk must be rescanned.
	lost bool
	// udevDone: udevd's event, once it ran its rules (udevfollow.go).
	udevDone bool
	// at is when the listener received it, for the event-to-applied
	// latency.
	at time.Time
}

// parseEvent decodes one raw message and keeps it when it is an add, change
// or remove of a whole disk; partitions and other subsystems are ignored.
func parseEvent(raw []byte, udev bool) (event, bool, error) {
	// Most uevents are not block disks' (a loop device brings a bdi one
	// too): skip them before reading their variables.
	if !bytes.Contains(raw, []byte("SUBSYSTEM=block\x00")) {
		return event{}, false, nil
	}
	var v ueventVars
	var env map[string]string
	if udev {
		// udevd's format, and every property kept for match.property.
		u, err := netlink.ParseUEvent(raw)
		if err != nil {
			return event{}, false, err
		}
		env = u.Env
		v = ueventVars{action: string(u.Action), kobj: u.KObj, subsystem: env["SUBSYSTEM"], devtype: env["DEVTYPE"],
			devpath: env["DEVPATH"], major: env["MAJOR"], minor: env["MINOR"], diskseq: env["DISKSEQ"]}
	} else {
		var err error
		if v, err = scanKernelUEvent(raw); err != nil {
			return event{}, false, err
		}
	}
	switch netlink.KObjAction(v.action) {
	case netlink.ADD, netlink.CHANGE, netlink.REMOVE:
	default:
		return event{}, false, nil
	}
	ev, ok, err := v.diskEvent()
	ev.props = env
	return ev, ok, err
}

// diskEvent is the event of a whole disk these variables describe (false
// for anything else), named after its DEVPATH (the header's when there is
// none) and with its identity when MAJOR and MINOR are there.
func (v ueventVars) diskEvent() (event, bool, error) {
	if v.subsystem != "block" || v.devtype != "disk" {
		return event{}, false, nil
	}
	devpath := v.devpath
	if devpath == "" {
		devpath = v.kobj
	}
	// DEVNAME is "/dev/x" in udev mode and may differ from the kernel name
	// (cciss!c0d0); the last DEVPATH element is the /sys/block name.
	name := path.Base(devpath)
	if sysfs.ValidateName(name) != nil || name == "/" {
		return event{}, false, fmt.Errorf("uevent with unusable DEVPATH %q", devpath)
	}
	ev := event{action: v.action, name: name}
	if v.major != "" && v.minor != "" {
		mm, err := sysfs.ParseMajorMinor(v.major + ":" + v.minor)
		if _, serr := strconv.ParseUint(v.diskseq, 10, 64); err == nil && (v.diskseq == "" || serr == nil) {
			ev.ident = sysfs.Ident{MajorMinor: mm, DiskSeq: v.diskseq}
		}
	}
	return ev, true, nil
}

// ueventVars are the variables of a uevent the daemon reads.
type ueventVars struct {
	action, kobj                                       string
	subsystem, devtype, devpath, major, minor, diskseq string
}

// scanKernelUEvent reads a kernel uevent ("action@devpath\0KEY=value\0...")
// for the variables the daemon uses. go-udev's ParseUEvent builds a map of
// every variable, ~6 KiB of garbage an event: half of what the daemon
// allocated in a burst of 1000 new disks. The format checks are
// ParseUEvent's (one '@' in the header, '=' in every variable), and every
// variable must end with its NUL, as the kernel's all do.
func scanKernelUEvent(raw []byte) (ueventVars, error) {
	var v ueventVars
	header, rest, ok := bytes.Cut(raw, []byte{0})
	if !ok {
		return v, netlink.ErrWrongUEventFormat
	}
	action, kobj, ok := bytes.Cut(header, []byte("@"))
	if !ok || bytes.IndexByte(kobj, '@') >= 0 {
		return v, netlink.ErrWrongUEventFormat
	}
	v.action, v.kobj = string(action), string(kobj)
	err := v.scan(rest, false)
	return v, err
}

// scan reads the variables the daemon uses from NUL-terminated KEY=value
// strings, in place: only the values kept are copied. ACTION is read only
// when withAction (udevd's messages have no header that names it).
func (v *ueventVars) scan(vars []byte, withAction bool) error {
	for len(vars) > 0 {
		field, rest, ok := bytes.Cut(vars, []byte{0})
		if !ok {
			return netlink.ErrWrongUEventFormat // no terminating NUL
		}
		vars = rest
		key, value, ok := bytes.Cut(field, []byte("="))
		if !ok {
			return netlink.ErrWrongUEventFormat
		}
		var dst *string
		switch string(key) { // no allocation: the compiler compares in place
		case "ACTION":
			if !withAction {
				continue
			}
			dst = &v.action
		case "SUBSYSTEM":
			dst = &v.subsystem
		case "DEVTYPE":
			dst = &v.devtype
		case "DEVPATH":
			dst = &v.devpath
		case "MAJOR":
			dst = &v.major
		case "MINOR":
			dst = &v.minor
		case "DISKSEQ":
			dst = &v.diskseq
		default:
			continue
		}
		*dst = string(value)
	}
	return nil
}

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
// overflows it (ENOBUFS), and the daemon rescans.
const receiveBuffer = 2 << 20

func dialNetlink(udev bool) (conn, error) {
	group := uint32(netlink.KernelEvent)
	if udev {
		group = uint32(netlink.UdevEvent)
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, syscall.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	fail := func(what string, err error) (conn, error) {
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

// Reconnect backoff bounds: a broken socket is retried quickly at first,
// never less often than every maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// listener owns the uevent socket and its read loop: go-udev's monitor stops
// at the first socket error, and this one must never stop listening.
type listener struct {
	dial dialer
	udev bool
	log  *slog.Logger
	out  chan<- event
	// parse keeps the events wanted from a raw message; parseEvent when nil.
	parse func(raw []byte) (event, bool, error)
	// heard, when set, is when the last message came (UnixNano).
	heard *atomic.Int64

	mu     sync.Mutex // guards c and closed: close runs on another goroutine
	c      conn
	closed bool
}

// run reads until ctx is done and close was called. ENOBUFS means the kernel dropped events (a
// burst larger than the receive buffer): report them lost, keep reading.
// Any other socket error: reconnect with backoff, then report events lost,
// since some may have come while no socket listened.
func (l *listener) run(ctx context.Context) {
	defer func() {
		l.mu.Lock()
		l.c.Close()
		l.mu.Unlock()
	}()
	backoff := minBackoff
	for {
		msg, err := l.c.ReadMsg()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			backoff = minBackoff
			if l.heard != nil {
				l.heard.Store(time.Now().UnixNano())
			}
			parse := l.parse
			if parse == nil {
				parse = func(raw []byte) (event, bool, error) { return parseEvent(raw, l.udev) }
			}
			ev, ok, err := parse(msg)
			ev.at = time.Now()
			if err != nil {
				l.log.Debug("unparsable uevent ignored", "error", err)
			}
			if ok && !l.send(ctx, ev) {
				return
			}
		case errors.Is(err, syscall.ENOBUFS):
			l.log.Warn("uevents were lost (socket receive buffer overflowed); rescanning every disk")
			if !l.send(ctx, event{lost: true}) {
				return
			}
		case errors.Is(err, netlink.ErrUntrustedSender):
			l.log.Warn("dropped a forged uevent", "error", err)
		case errors.Is(err, netlink.ErrTruncatedMessage):
			l.log.Warn("dropped an oversized uevent", "error", err)
		default:
			l.log.Error("uevent socket failed; reconnecting", "error", err)
			l.c.Close()
			if !l.reconnect(ctx, &backoff) {
				return
			}
			if !l.send(ctx, event{lost: true}) {
				return
			}
		}
	}
}

func (l *listener) reconnect(ctx context.Context, backoff *time.Duration) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(*backoff):
		}
		*backoff = min(2**backoff, maxBackoff)
		c, err := l.dial(l.udev)
		if err == nil {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				c.Close()
				return false
			}
			l.c = c
			l.mu.Unlock()
			l.log.Info("uevent socket reconnected; rescanning every disk")
			return true
		}
		l.log.Error("uevent socket: reconnecting failed", "error", err, "retry_in", *backoff)
	}
}

// close closes the socket, so that a run blocked reading returns (its ctx
// done), and a reconnect in progress gives up.
func (l *listener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.c.Close()
}

func (l *listener) send(ctx context.Context, ev event) bool {
	select {
	case l.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// udevProperties reads the properties udevd recorded for a block device
// (its database, /run/udev/data/b<major>:<minor>, "E:KEY=VALUE" lines), nil
// when it has none.
func udevProperties(dir, majorMinor string) map[string]string {
	if majorMinor == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "b"+majorMinor))
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
