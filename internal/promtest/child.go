package promtest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
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
