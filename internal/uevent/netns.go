package uevent

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// initNetNSInode is the initial network namespace's inode number on
// kernels that fix it (include/linux/proc_ns.h, PROC_NET_INIT_INO). A
// kernel that numbers it otherwise does no harm: PrivateNetNS then
// compares with init's namespace, or failing that looks for an interface
// other than loopback.
const initNetNSInode = 0xEFFFFFF9

// PrivateNetNS reports whether this process runs in a network namespace
// other than the host's (systemd's PrivateNetwork=yes, unshare -n), and
// how it knows. udevd sends its processed events on a netlink multicast
// group that, unlike the kernel's uevents, stays in its own network
// namespace, so a process in another one hears nothing from it: the Udev
// and UdevDone sources cannot work there.
func PrivateNetNS() (bool, string) {
	self, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return false, "" // cannot tell: do not refuse
	}
	if self == initNetNSInode {
		return false, ""
	}
	// An older kernel numbers the initial namespace otherwise: compare
	// with init's, when this process may read it.
	if init, err := nsInode("/proc/1/ns/net"); err == nil {
		if init != self {
			return true, fmt.Sprintf("/proc/self/ns/net is not init's (inode %d, init's %d)", self, init)
		}
		return false, ""
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return false, ""
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagLoopback == 0 {
			return false, ""
		}
	}
	return true, "only a loopback interface in this network namespace"
}

func nsInode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no inode", path)
	}
	return st.Ino, nil
}
