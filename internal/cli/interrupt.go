package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// stopSignals are the signals that would end the process at once, and so
// must first let a command that changed a disk put it back: SIGHUP (the
// terminal or SSH session closed), SIGINT, SIGQUIT, SIGTERM, and SIGPIPE.
// Go's runtime dies of a SIGPIPE raised by a write to a closed pipe on
// stdout or stderr unless SIGPIPE is notified (os/signal: "SIGPIPE"); with
// it notified the write fails with EPIPE instead. SIGKILL cannot be
// caught: the next probe or daemon start restores what it left.
var stopSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGPIPE}

// interruptible returns a context that ends, with a cause naming why, on
// any of stopSignals and when the reader of the command's stdout or stderr
// goes away (`iosched probe ... | head -1`: a pipe's write end polls
// POLLERR once no reader is left, a hung-up terminal POLLHUP), which
// nothing would otherwise notice before the command writes its result.
// The signals stay caught until stop is called, so a second one during
// the restore does not cut it short.
func (e *env) interruptible(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("%v received", s))
		case <-done:
		}
	}()
	var outs []*os.File
	for _, w := range []any{e.stdout, e.stderr} {
		if f, ok := w.(*os.File); ok {
			outs = append(outs, f)
		}
	}
	stopWatch := watchClosed(outs, cancel)
	return ctx, func() {
		close(done)
		wg.Wait()
		stopWatch()
		signal.Stop(sigs)
		cancel(nil)
	}
}

// errOutputClosed is the cause of a context interruptible ended because
// nobody reads the command's output any more.
var errOutputClosed = errors.New("the output was closed (its reader went away)")

// watchClosed calls cancel with errOutputClosed when one of files reports
// POLLERR or POLLHUP, until the stop it returns is called. A file that is
// not a pipe, socket or terminal never does (a regular file, /dev/null).
func watchClosed(files []*os.File, cancel context.CancelCauseFunc) (stop func()) {
	if len(files) == 0 {
		return func() {}
	}
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC); err != nil {
		return func() {} // no watch; the signals still stop the command
	}
	fds := []unix.PollFd{{Fd: int32(wake[0]), Events: unix.POLLIN}}
	for _, f := range files {
		fds = append(fds, unix.PollFd{Fd: int32(f.Fd())}) // events 0: POLLERR and POLLHUP only
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || fds[0].Revents != 0 {
				return
			}
			for i := 1; i < len(fds); i++ {
				switch r := fds[i].Revents; {
				case r&unix.POLLNVAL != 0:
					fds[i].Fd = -1 // closed by the process: poll ignores it now
				case r&(unix.POLLERR|unix.POLLHUP) != 0:
					cancel(errOutputClosed)
					return
				}
			}
		}
	}()
	return func() {
		unix.Close(wake[1]) // wakes the poll: POLLHUP on the read end
		<-ended
		unix.Close(wake[0])
	}
}
