package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
)

// A daemon in udev mode started in a network namespace of its own (as
// PrivateNetwork=yes does), where udevd's events cannot reach it, refuses
// to start: exit 2, naming the drop-in and the kernel mode. The same daemon
// in kernel mode starts there. Its policy matches no device.
func TestIntegrationUdevModeRefusedUnderUnshare(t *testing.T) {
	looptest.Require(t) // root: unshare -n needs CAP_SYS_ADMIN
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(policyPath, []byte("[[rule]]\nname = \"nothing\"\n[rule.match]\nname = [\"iosched-test-matches-nothing\"]\n[rule.set]\nscheduler = \"none\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sysfsRoot := filepath.Join(dir, "sys")
	if err := os.MkdirAll(filepath.Join(sysfsRoot, "class", "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(source string, wait time.Duration) (int, string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		cmd := exec.CommandContext(ctx, unshare, "-n", os.Args[0])
		cmd.Env = append(os.Environ(), "IOSCHED_CLI_CHILD_ARGS="+strings.Join([]string{
			"--policy", policyPath, "--sysfs", sysfsRoot, "daemon", "--uevent-source", source,
			"--runtime-dir", filepath.Join(dir, "run-"+source), "--state-dir", filepath.Join(dir, "state-"+source),
			"--lock-file", filepath.Join(dir, "disks.lock"),
		}, "\n"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return 0, out.String(), true // still running when killed
		case errors.As(err, &ee):
			return ee.ExitCode(), out.String(), false
		case err != nil:
			t.Fatalf("unshare -n: %v\n%s", err, out.String())
		}
		return 0, out.String(), false
	}

	code, out, timedOut := run("udev", 20*time.Second)
	if timedOut || code != 2 || !strings.Contains(out, "/usr/share/iosched/udev-mode.conf") || !strings.Contains(out, `uevent_source = "kernel"`) {
		t.Errorf("udev mode under unshare -n: exit %d (still running: %v), output:\n%s", code, timedOut, out)
	}
	// Kernel mode works there: still running when the test stops it.
	if code, out, timedOut := run("kernel", 2*time.Second); !timedOut {
		t.Errorf("kernel mode under unshare -n exited %d:\n%s", code, out)
	}
}
