// Command floor is the least a uevent-driven tool can do to set the I/O
// scheduler of new disks: it listens for kernel uevents and, for each loop
// device added whose number is in the range it is given, writes the given
// value to its queue/scheduler and nothing else (no policy, no matching, no
// state, no log of each write). run.sh measures it in the same rounds as the
// daemon, so the daemon's figures can be read as a ratio to this floor.
//
// Writes of different disks run concurrently, as the kernel lets them
// overlap. It binds the netlink socket before it reports READY=1 on $NOTIFY_SOCKET
// (when set), so that no uevent of a loop created after that is missed.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	first := flag.Int("first", 0, "first loop number handled")
	count := flag.Int("count", 0, "number of loops handled (loopFIRST .. loopFIRST+COUNT-1)")
	sched := flag.String("sched", "", "value written to queue/scheduler")
	sysfs := flag.String("sysfs", "/sys", "sysfs mount point")
	flag.Parse()
	if *count <= 0 || *first < 0 || *sched == "" {
		fmt.Fprintln(os.Stderr, "floor: want -first N -count N (> 0) -sched NAME")
		os.Exit(2)
	}
	// run returns only on an error; SIGTERM and SIGINT end floor with 0.
	err := run(*first, *count, *sched, *sysfs)
	fmt.Fprintln(os.Stderr, "floor:", err)
	os.Exit(1)
}

func run(first, count int, sched, sysfs string) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	// A burst of loops created while floor is stopped queues its uevents
	// here: the buffer must hold them all, or some are lost (ENOBUFS).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	if err := notifyReady(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; os.Exit(0) }()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOBUFS) {
			fmt.Fprintln(os.Stderr, "floor: uevents were lost (ENOBUFS)")
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		name, ok := wanted(buf[:n], first, count)
		if !ok {
			continue
		}
		// Each write of queue/scheduler freezes the queue and waits for
		// RCU grace periods; those of different disks overlap, so one
		// write at a time would make the floor the slowest reaction of
		// all. Each disk gets its own writer, at most one per uevent.
		go write(filepath.Join(sysfs, "block", name, "queue", "scheduler"), sched)
	}
}

func write(path, value string) {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		// A loop removed again before its write is not an error of
		// floor's: it is reported and the others go on.
		fmt.Fprintln(os.Stderr, "floor:", err)
	}
}

// wanted reports the name of the disk a kernel uevent adds, when it is a
// loop device of loopFIRST .. loopFIRST+COUNT-1. Messages of udevd
// ("libudev" header) and of other actions, subsystems, partitions and
// devices are not wanted.
func wanted(msg []byte, first, count int) (string, bool) {
	fields := bytes.Split(msg, []byte{0})
	if len(fields) < 2 || !bytes.HasPrefix(fields[0], []byte("add@")) {
		return "", false
	}
	var action, subsystem, devtype, devname string
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(string(f), "=")
		if !ok {
			continue
		}
		switch k {
		case "ACTION":
			action = v
		case "SUBSYSTEM":
			subsystem = v
		case "DEVTYPE":
			devtype = v
		case "DEVNAME":
			devname = v
		}
	}
	if action != "add" || subsystem != "block" || devtype != "disk" {
		return "", false
	}
	num, ok := strings.CutPrefix(devname, "loop")
	if !ok || num == "" || num[0] == '+' || num[0] == '-' {
		return "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < first || n-first >= count {
		return "", false
	}
	return devname, true
}

// notifyReady sends READY=1 to $NOTIFY_SOCKET, as a Type=notify service
// does; nothing when it is unset.
func notifyReady() error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("READY=1")); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	return nil
}
