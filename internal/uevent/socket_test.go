package uevent

import (
	"errors"
	"syscall"
	"testing"

	"github.com/pilebones/go-udev/netlink"
)

func TestCheckSender(t *testing.T) {
	t.Parallel()
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
