// The lock a running daemon holds on its runtime directory: one daemon a
// directory, its pid in the lock file for the next one's error.

package disklock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runtimeLockName is the file in the runtime directory a running daemon holds an
// exclusive flock on, and writes its pid to. Two daemons on one runtime
// directory would flap every disk between their policies and remove each
// other's state file.
const runtimeLockName = "lock"

// LockRuntimeDir takes the runtime directory for this process, creating it
// when missing. A directory another daemon holds, or one that cannot be
// written (read-only), is an error: status and reload would not find this
// daemon. The lock is released by the returned function, or by the process
// ending.
func LockRuntimeDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	path := filepath.Join(dir, runtimeLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		b, _ := os.ReadFile(path)
		f.Close()
		pid := strings.TrimSpace(string(b))
		if _, perr := strconv.Atoi(pid); perr != nil {
			pid = "unknown"
		}
		return nil, fmt.Errorf("another iosched daemon (pid %s) runs with runtime directory %s", pid, dir)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("runtime directory: writing %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
