package promtest

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// child is a process a test started (startChild).
type child struct {
	// exited is closed once the process has exited and its output is
	// copied; err is then Wait's result.
	exited chan struct{}
	err    error
	// stop ends the process (SIGTERM, SIGKILL after 30 s) and waits for
	// it; safe to call more than once.
	stop func()
}

// startChild starts cmd so that it dies with the test: it gets SIGKILL
// when the thread that started it exits (Pdeathsig is the forking
// thread's, not the process's). That thread is one of its own, locked by a
// goroutine that never unlocks it, so the runtime neither hands it to
// other goroutines nor ends it while the child may run; stop ends the
// child, then the goroutine and with it the thread. A test binary killed
// outright takes the thread, and so the child, with it.
func startChild(cmd *exec.Cmd) (*child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine.
		started <- cmd.Start()
		<-release
	}()
	if err := <-started; err != nil {
		close(release)
		return nil, err
	}
	c := &child{exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	c.stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-c.exited
		}
		close(release)
	})
	return c, nil
}

// serveOnFreePort runs name with args(addr) on a free 127.0.0.1 port and
// returns once ours(addr) says the process answering there is this one.
// A free port is found by binding port 0 and closing it; another process
// can take it before name binds it, which shows as name exiting at once:
// then another port is tried, five in all. Starting has no deadline but
// the test's own and the process exiting (a server may replay a long
// write-ahead log). The process is stopped when the test ends.
func serveOnFreePort(t testing.TB, name string, args func(addr string) []string, ours func(addr string) bool) (addr string, pid int) {
	t.Helper()
	var lastErr error
	for range 5 {
		addr, pid, err := serveOn(t, name, args, ours)
		if err == nil {
			return addr, pid
		}
		lastErr = err
	}
	t.Fatalf("%s did not start: %v", name, lastErr)
	return "", 0
}

func serveOn(t testing.TB, name string, args func(addr string) []string, ours func(addr string) bool) (string, int, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, err
	}
	addr := l.Addr().String()
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(name, args(addr)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	c, err := startChild(cmd)
	if err != nil {
		return "", 0, err
	}
	for {
		select {
		case <-c.exited:
			c.stop()
			return "", 0, fmt.Errorf("%s on %s exited: %v\n%s", name, addr, c.err, lastBytes(log.Bytes(), 4096))
		default:
		}
		if ours(addr) {
			t.Cleanup(c.stop)
			return addr, cmd.Process.Pid, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
