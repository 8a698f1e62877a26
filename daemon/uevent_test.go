package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pilebones/go-udev/netlink"

	"github.com/iosched/iosched/sysfs"
)

func TestParseEvent(t *testing.T) {
	udevMsg := func(props string) []byte {
		// libudev's header: "libudev\0", magic (big endian), header size,
		// properties offset and length (native endian), filter fields.
		h := make([]byte, 40)
		copy(h, "libudev\x00")
		h[8], h[9], h[10], h[11] = 0xfe, 0xed, 0xca, 0xfe
		h[12] = 40
		h[16] = 40
		h[20] = byte(len(props))
		return append(h, props...)
	}
	tests := []struct {
		name   string
		raw    []byte
		udev   bool
		ok     bool
		want   event
		hasErr bool
	}{
		{"add of a disk", uevent("add", "loop7", "disk"), false, true, event{action: "add", name: "loop7"}, false},
		{"change of a disk", uevent("change", "vda", "disk"), false, true, event{action: "change", name: "vda"}, false},
		{"remove of a disk", uevent("remove", "loop7", "disk"), false, true, event{action: "remove", name: "loop7"}, false},
		{"a partition", uevent("add", "vda1", "partition"), false, false, event{}, false},
		{"bind is not for us", uevent("bind", "vda", "disk"), false, false, event{}, false},
		{"another subsystem", []byte("add@/devices/virtual/bdi/7:7\x00ACTION=add\x00DEVPATH=/devices/virtual/bdi/7:7\x00SUBSYSTEM=bdi\x00"), false, false, event{}, false},
		{"the kernel name, not DEVNAME", []byte("add@/devices/pci0000:00/cciss!c0d0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/cciss!c0d0\x00SUBSYSTEM=block\x00DEVNAME=cciss/c0d0\x00DEVTYPE=disk\x00"), false, true, event{action: "add", name: "cciss!c0d0"}, false},
		{"garbage", []byte("hello"), false, false, event{}, false},
		{"garbage that says block", []byte("hello\x00SUBSYSTEM=block\x00"), false, false, event{}, true},
		{"the identity from MAJOR, MINOR and DISKSEQ",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVNAME=loop7\x00DEVTYPE=disk\x00DISKSEQ=42\x00"),
			false, true, event{action: "add", name: "loop7", ident: sysfs.Ident{MajorMinor: "7:7", DiskSeq: "42"}}, false},
		{"no DISKSEQ (before 5.15)",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00"),
			false, true, event{action: "add", name: "loop7", ident: sysfs.Ident{MajorMinor: "7:7"}}, false},
		{"an unusable identity is left to be read",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=x\x00DEVTYPE=disk\x00DISKSEQ=1\x00"),
			false, true, event{action: "add", name: "loop7"}, false},
		{"a header without '@'", []byte("add /devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00"), false, false, event{}, true},
		{"a variable without '='", []byte("add@/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE\x00"), false, false, event{}, true},
		{"an unterminated variable", []byte("add@/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk"), false, false, event{}, true},
		{"an action not acted on", []byte("online@/devices/virtual/block/loop7\x00ACTION=online\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00"), false, false, event{}, false},
		{"udev mode keeps the properties",
			udevMsg("ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00DEVNAME=/dev/loop7\x00ID_BUS=ata\x00"),
			true, true, event{action: "add", name: "loop7", props: map[string]string{"ID_BUS": "ata"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := parseEvent(tt.raw, tt.udev)
			if (err != nil) != tt.hasErr {
				t.Fatalf("error = %v, want error: %v", err, tt.hasErr)
			}
			if ok != tt.ok {
				t.Fatalf("kept = %v, want %v", ok, tt.ok)
			}
			if got.action != tt.want.action || got.name != tt.want.name || got.ident != tt.want.ident {
				t.Errorf("got %s %s %+v, want %s %s %+v", got.action, got.name, got.ident, tt.want.action, tt.want.name, tt.want.ident)
			}
			for k, v := range tt.want.props {
				if got.props[k] != v {
					t.Errorf("property %s = %q, want %q", k, got.props[k], v)
				}
			}
			if !tt.udev && got.props != nil {
				t.Errorf("kernel-mode event carries properties %v", got.props)
			}
		})
	}
}

// startListener runs a listener over the dialer's sockets until the test
// ends.
func startListener(t *testing.T, fd *fakeDialer) (<-chan event, *logBuffer) {
	t.Helper()
	c, err := fd.dial(false)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan event, 16)
	log := &logBuffer{}
	l := &listener{dial: fd.dial, log: slog.New(slog.NewTextHandler(log, nil)), out: out, c: c}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		l.close()
		<-done
	})
	return out, log
}

func next(t *testing.T, events <-chan event) event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return event{}
	}
}

func TestListenerENOBUFSMeansRescanAndKeepsTheSocket(t *testing.T) {
	c := newFakeConn()
	fd := &fakeDialer{conns: []*fakeConn{c}}
	events, log := startListener(t, fd)
	c.msgs <- fakeMsg{err: fmt.Errorf("recvmsg: %w", syscall.ENOBUFS)}
	c.msgs <- fakeMsg{b: uevent("add", "loop20001", "disk")}
	if ev := next(t, events); !ev.lost {
		t.Fatalf("after ENOBUFS got %+v, want a lost-events notice", ev)
	}
	if ev := next(t, events); ev.name != "loop20001" {
		t.Fatalf("after ENOBUFS got %+v, want the next event from the same socket", ev)
	}
	if fd.count() != 1 {
		t.Errorf("dialed %d times; ENOBUFS must not reconnect", fd.count())
	}
	if len(log.lines("uevents were lost")) != 1 {
		t.Errorf("log does not say events were lost:\n%s", log)
	}
}

func TestListenerReconnectsAfterSocketError(t *testing.T) {
	first, second := newFakeConn(), newFakeConn()
	fd := &fakeDialer{conns: []*fakeConn{first, second}}
	events, log := startListener(t, fd)
	first.msgs <- fakeMsg{err: syscall.EBADF}
	if ev := next(t, events); !ev.lost {
		t.Fatalf("after a socket error got %+v, want a lost-events notice (rescan)", ev)
	}
	second.msgs <- fakeMsg{b: uevent("change", "loop20002", "disk")}
	if ev := next(t, events); ev.name != "loop20002" {
		t.Fatalf("got %+v, want the event from the new socket", ev)
	}
	if fd.count() != 2 {
		t.Errorf("dialed %d times, want 2", fd.count())
	}
	select {
	case <-first.closed:
	default:
		t.Error("the broken socket was not closed")
	}
	if len(log.lines("reconnecting")) == 0 || len(log.lines("reconnected")) == 0 {
		t.Errorf("log does not tell the reconnection:\n%s", log)
	}
}

func TestListenerKeepsRetryingTheSocket(t *testing.T) {
	c, later := newFakeConn(), newFakeConn()
	fd := &fakeDialer{conns: []*fakeConn{c}}
	events, log := startListener(t, fd)
	c.msgs <- fakeMsg{err: syscall.EBADF}
	waitFor(t, 5*time.Second, "two failed reconnects", func() bool { return len(log.lines("reconnecting failed")) >= 2 })
	fd.mu.Lock()
	fd.conns = append(fd.conns, later)
	fd.mu.Unlock()
	if ev := next(t, events); !ev.lost {
		t.Fatalf("got %+v, want a lost-events notice once reconnected", ev)
	}
}

func TestListenerDropsForgedEvents(t *testing.T) {
	c := newFakeConn()
	events, log := startListener(t, &fakeDialer{conns: []*fakeConn{c}})
	c.msgs <- fakeMsg{err: fmt.Errorf("%w: kernel group message sent by pid 4242", netlink.ErrUntrustedSender)}
	c.msgs <- fakeMsg{b: uevent("add", "loop20003", "disk")}
	if ev := next(t, events); ev.name != "loop20003" || ev.lost {
		t.Fatalf("got %+v, want only the genuine event", ev)
	}
	if got := log.lines("dropped a forged uevent"); len(got) != 1 || !strings.Contains(got[0], "pid 4242") {
		t.Errorf("log does not report the forged event with its sender:\n%s", log)
	}
}

func TestCheckSender(t *testing.T) {
	creds := func(pid, uid int) []byte {
		return syscall.UnixCredentials(&syscall.Ucred{Pid: int32(pid), Uid: uint32(uid)})
	}
	kernel := &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: 1}
	for _, tc := range []struct {
		name string
		from syscall.Sockaddr
		oob  []byte
		ok   bool
	}{
		{"the kernel", kernel, creds(0, 0), true},
		{"the kernel seen from a user namespace", kernel, creds(0, 65534), true},
		{"udevd, root", &syscall.SockaddrNetlink{Groups: 2, Pid: 812}, creds(812, 0), true},
		{"a process in the kernel group", &syscall.SockaddrNetlink{Groups: 1, Pid: 4242}, creds(4242, 0), false},
		{"unicast", &syscall.SockaddrNetlink{Groups: 0, Pid: 4242}, creds(4242, 0), false},
		{"an unprivileged process in udevd's group", &syscall.SockaddrNetlink{Groups: 2, Pid: 4242}, creds(4242, 1000), false},
		{"no credentials", kernel, nil, false},
		{"not netlink", &syscall.SockaddrUnix{Name: "/x"}, creds(0, 0), false},
	} {
		err := checkSender(tc.from, tc.oob)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, netlink.ErrUntrustedSender) {
			t.Errorf("%s: %v is not ErrUntrustedSender", tc.name, err)
		}
	}
}

// scanKernelUEvent reads what go-udev's ParseUEvent reads from every kernel
// message both accept (go test -fuzz FuzzScanKernelUEvent ./daemon).
func FuzzScanKernelUEvent(f *testing.F) {
	f.Add(uevent("add", "loop7", "disk"))
	f.Add([]byte("change@/devices/virtual/block/loop7\x00ACTION=change\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00DISKSEQ=42\x00"))
	f.Add([]byte("add@/devices/virtual/bdi/7:7\x00ACTION=add\x00SUBSYSTEM=bdi\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := scanKernelUEvent(raw)
		if bytes.HasPrefix(raw, []byte("libudev\x00")) {
			return // not the kernel's format
		}
		u, uerr := netlink.ParseUEvent(raw)
		if uerr != nil {
			return // ParseUEvent also refuses actions it does not know
		}
		if err != nil {
			if bytes.HasSuffix(raw, []byte{0}) {
				t.Fatalf("refused %q, which ParseUEvent reads: %v", raw, err)
			}
			return // an unterminated last variable, which ParseUEvent drops
		}
		want := ueventVars{action: string(u.Action), kobj: u.KObj, subsystem: u.Env["SUBSYSTEM"], devtype: u.Env["DEVTYPE"],
			devpath: u.Env["DEVPATH"], major: u.Env["MAJOR"], minor: u.Env["MINOR"], diskseq: u.Env["DISKSEQ"]}
		if v != want {
			t.Fatalf("%q: scanned %+v, ParseUEvent %+v", raw, v, want)
		}
	})
}

// Both parsers copy only the values they keep: a burst of 1000 new disks
// brings 2000 events, and a map of every variable (go-udev's ParseUEvent)
// would be kilobytes each. The bounds are what the shared scanner
// allocates (go test -run TestParseAllocs ./daemon; 7 and 6 when it was
// introduced).
func TestParseAllocs(t *testing.T) {
	k := []byte("change@/devices/virtual/block/loop7\x00ACTION=change\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00DISKSEQ=42\x00")
	u := udevdMsg("change", "loop20000", "disk")
	if n := testing.AllocsPerRun(100, func() { _, _, _ = parseEvent(k, false) }); n > 7 {
		t.Errorf("kernel uevent: %v allocations, want at most 7", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = parseUdevdEvent(u) }); n > 6 {
		t.Errorf("udevd event: %v allocations, want at most 6", n)
	}
}
