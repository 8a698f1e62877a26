package statefile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Verify checks that pid runs, started at start (clock ticks since boot, as
// /proc/PID/stat says), and runs exe: the process that wrote a state file,
// not another one given its pid since. A record lacking the start time or
// the executable proves nothing and is refused.
func Verify(pid int, start uint64, exe string) error {
	if pid <= 0 {
		return fmt.Errorf("no pid")
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("it has exited")
	}
	if start == 0 || exe == "" {
		return fmt.Errorf("the record lacks the start time or executable to tell it from another process")
	}
	if got := StartTime(pid); got != start {
		return fmt.Errorf("it has exited (the pid now belongs to a process started at %d, not %d)", got, start)
	}
	if got := Exe(pid); got != exe {
		return fmt.Errorf("it runs %q, not %q", got, exe)
	}
	return nil
}

// StartTime is field 22 of /proc/PID/stat, 0 when unreadable.
func StartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command (field 2) may hold spaces and parentheses: count from
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// Exe is the executable pid runs, "" when unreadable. An executable replaced
// on disk since (a package upgrade) reads as "PATH (deleted)"; the suffix is
// dropped, so the daemon is still recognised.
func Exe(pid int) string {
	s, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(s, " (deleted)")
}
