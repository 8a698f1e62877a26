package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// ErrUdevUnreachable is a start refused in udev mode where udevd's events
// cannot arrive: the daemon runs in a network namespace of its own.
var ErrUdevUnreachable = errors.New("udev mode cannot work in a private network namespace")

// initNetNSInode is the initial network namespace's inode number on
// kernels that fix it (include/linux/proc_ns.h, PROC_NET_INIT_INO). A
// kernel that numbers it otherwise does no harm: privateNetNS then
// compares with init's namespace, or failing that looks for an interface
// other than loopback.
const initNetNSInode = 0xEFFFFFF9

// privateNetNS reports whether this process runs in a network namespace
// other than the host's (systemd's PrivateNetwork=yes, unshare -n), and
// how it knows. udevd sends its processed events on a netlink multicast
// group that, unlike the kernel's uevents, stays in its own network
// namespace, so a daemon in another one hears nothing from it.
func privateNetNS() (bool, string) {
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

// refuseUdevMode is the error that refuses udev mode in a private network
// namespace, naming what to do instead.
func refuseUdevMode(why string) error {
	return fmt.Errorf("%w (%s): udevd's events do not reach this process. "+
		"Run it in the host's network namespace (the unit's drop-in /usr/share/iosched/udev-mode.conf does so), "+
		`or set [daemon] uevent_source = "kernel": the kernel's uevents reach a private network namespace too`, ErrUdevUnreachable, why)
}
