package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// cmdTouch reads one 4 KiB block (O_DIRECT, offset 0) from each loop of
// [first, first+count) every interval until SIGTERM or SIGINT: every disk's
// stat counters then move between two of a daemon's samples, as a fleet's
// disks in use do, at a load that costs the machine little. Read-only.
func cmdTouch(args []string) error {
	fs := flag.NewFlagSet("touch", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	every := fs.Duration("every", time.Second, "read each loop once per this interval")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	fds := make([]int, 0, r.count)
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	for n := r.first; n < r.first+r.count; n++ {
		fd, err := syscall.Open(fmt.Sprintf("/dev/loop%d", n), syscall.O_RDONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
	}
	// O_DIRECT wants a buffer aligned to the logical block size.
	raw := make([]byte, 2*4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
	buf := raw[off : off+4096]
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		for _, fd := range fds {
			if _, err := syscall.Pread(fd, buf, 0); err != nil {
				return err
			}
		}
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}
