package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/statefile"
)

// The daemon at --log-level debug with its stderr appended to a file in
// the policy directory it follows: its own log lines are events in that
// directory, and they must not be taken for (and logged as) policy file
// events, or each line begets the next without end. Run as a user would:
// the iosched command in a process of its own, for a few seconds, with
// a real edit of the policy in them (which must still reload). Before,
// the log grew by tens of megabytes in those seconds and the daemon kept
// a CPU busy.
func TestDaemonDebugLogInItsPolicyDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy.d")
	sysfsRoot := filepath.Join(dir, "sys")
	for _, d := range []string{policyDir, filepath.Join(sysfsRoot, "class", "block")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	policyFile := filepath.Join(policyDir, "10-test.toml")
	rule := "[[rule]]\nname = %q\n[rule.match]\nname = [\"no-such-disk\"]\n[rule.set]\nscheduler = \"none\"\n"
	if err := os.WriteFile(policyFile, fmt.Appendf(nil, rule, "v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(policyDir, "iosched.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	runtimeDir := filepath.Join(dir, "run")

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "IOSCHED_CLI_CHILD_ARGS="+strings.Join([]string{
		"--policy", policyDir, "--sysfs", sysfsRoot, "daemon", "--log-level", "debug",
		"--runtime-dir", runtimeDir, "--state-dir", filepath.Join(dir, "state"),
		"--lock-file", filepath.Join(dir, "disks.lock"),
	}, "\n"))
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the daemon exited: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Error("the daemon did not stop on SIGTERM within 30 s")
		}
	}
	defer stop()

	reloads := func() int {
		st, err := statefile.Read(runtimeDir)
		if err != nil || st.LastReload == nil || !st.LastReload.OK {
			return 0
		}
		return st.LastReload.Seq
	}
	eventually.True(t, 60*time.Second, "the daemon's state file", func() bool {
		_, err := statefile.Read(runtimeDir)
		return err == nil
	})
	cpuAtStart := onCPU(t, cmd.Process.Pid)
	began := time.Now()

	// An edit of the policy is still followed and reloads it.
	if err := os.WriteFile(policyFile, fmt.Appendf(nil, rule, "v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the reload after an edit of the policy", func() bool { return reloads() >= 1 })
	// The few seconds the feedback needed to fill a disk.
	time.Sleep(3*time.Second - time.Since(began))
	cpu, elapsed := onCPU(t, cmd.Process.Pid)-cpuAtStart, time.Since(began)
	stop()

	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(log, []byte("\n"))
	t.Logf("%d log lines, %d bytes; %s on a CPU in %s", lines, len(log), cpu, elapsed)
	// The log file is no policy file: no line is about an event on it.
	// (The daemon also logs, at debug, the uevents of other disks on this
	// machine, which a line count would take for the loop.)
	if self := bytes.Count(log, []byte(filepath.Base(logPath))); self > 0 {
		t.Errorf("the daemon logged %d lines about its own log file (%d lines, %d bytes in %s); the last ones:\n%s", self, lines, len(log), elapsed, lastLines(string(log), 10))
	}
	// Idle but for one reload, the daemon is on a CPU for milliseconds; a
	// loop that logs its own lines keeps it there all the time.
	if cpu > elapsed/2 {
		t.Errorf("the daemon was on a CPU for %s of %s", cpu, elapsed)
	}
}

// onCPU is the time all the process's threads have run, user and
// system (/proc/PID/stat fields 14 and 15, in clock ticks: USER_HZ, 100
// on Linux as the proc(5) man page says).
func onCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: count from after it.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
