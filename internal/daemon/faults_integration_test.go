package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/statefile"
)

// Faults on real loop devices (loops 23000-23099). Each test says what the
// daemon did before the change that made it pass.

// TestIntegrationForgedRemove: `echo remove > /sys/block/loopN/uevent` (what
// `udevadm trigger --action=remove` does) leaves the disk managed, and a stop
// with restore_on_exit puts its original values back. Before, the daemon
// forgot the disk: it stayed on the policy's values while the log said
// "original values restored" failed=0.
func TestIntegrationForgedRemove(t *testing.T) {
	requireLoops(t)
	r := start(t, testPolicy(restorePolicy))
	name := loops(t, 23000, 1)[0]
	waitConverged(t, []string{name}, 10*time.Second)
	b, err := os.ReadFile(filepath.Join(r.stateDir, "originals.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f originals.File
	if err := json.Unmarshal(b, &f); err != nil || f.Disks[name] == nil {
		t.Fatalf("originals file %s: %v", b, err)
	}
	want := f.Disks[name].Values
	passes := r.passCount(name)
	if err := os.WriteFile("/sys/block/"+name+"/uevent", []byte("remove"), 0); err != nil {
		t.Fatal(err)
	}
	r.waitPassesOf(t, name, passes+1)
	waitFor(t, 5*time.Second, "the state file to list "+name, func() bool {
		st, err := statefile.Read(r.runtimeDir)
		return err == nil && st.Disks[name] != nil && st.Managed == 1
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for attr, v := range want {
		got, err := os.ReadFile("/sys/block/" + name + "/queue/" + attr)
		if err != nil {
			t.Fatal(err)
		}
		if attr == "scheduler" && !strings.Contains(string(got), "["+v+"]") || attr != "scheduler" && strings.TrimSpace(string(got)) != v {
			t.Errorf("after stop %s %s = %q, want the original %q", name, attr, strings.TrimSpace(string(got)), v)
		}
	}
	restored := r.restores.Writes()
	if len(restored) == 0 {
		t.Errorf("nothing restored at stop")
	}
	for _, w := range restored {
		if w.Disk != name || w.Err != "" || want[w.Attr] != w.Value {
			t.Errorf("restore write %s, want %s's originals %v", w, name, want)
		}
	}
}

// TestIntegrationRefusedWrite: a value the kernel refuses (nr_requests =
// 100000 on a loop device: EINVAL) is logged once, kept in status, and not
// written again on every reconcile. Before, it was written and logged as an
// error on every reconcile: 7 errors a disk in 6 s with a 1 s interval.
func TestIntegrationRefusedWrite(t *testing.T) {
	requireLoops(t)
	r := start(t, strings.Replace(testPolicy("[daemon]\nreconcile_interval = \"100ms\"\n"), "nr_requests = 64", "nr_requests = 100000", 1))
	name := loops(t, 23010, 1)[0]
	waitFor(t, 10*time.Second, "the refusal to show in status", func() bool {
		st, err := statefile.Read(r.runtimeDir)
		return err == nil && st.Disks[name] != nil && len(st.Disks[name].Refused) == 1
	})
	st, _ := statefile.Read(r.runtimeDir)
	if ref := st.Disks[name].Refused[0]; ref.Attribute != "nr_requests" || ref.Value != "100000" || !strings.Contains(ref.Error, "invalid argument") {
		t.Errorf("refusal in status = %+v", ref)
	}
	// Ten reconciles later, still one write and one error.
	r.waitScans(t, 10, "reconcile", 10*time.Second)
	if w := r.writes.Of(name, "nr_requests"); len(w) != 1 || w[0].Value != "100000" || !strings.Contains(w[0].Err, "invalid argument") {
		t.Errorf("nr_requests writes %v, want the one refused, not written again within a minute", w)
	}
	// Logged once, not at each reconcile: the journal must not fill with
	// the same error, and that is the behaviour here.
	if n := len(r.log.Lines("write failed", "device="+name, "attribute=nr_requests")); n != 1 {
		t.Errorf("%d errors logged for one refused value, want 1", n)
	}
	if st, _ := statefile.Read(r.runtimeDir); st.Disks[name].LastError == nil {
		t.Errorf("the disk's last error was cleared while its write is still refused")
	}
}

// TestIntegrationReadOnlyRuntimeDir: a runtime directory the daemon cannot
// write keeps it from starting: status and reload, which read the state
// file there, would say no daemon runs. Before, it started and managed
// disks while status said it did not run.
func TestIntegrationReadOnlyRuntimeDir(t *testing.T) {
	requireLoops(t)
	dir := t.TempDir()
	runtimeDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runtimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", runtimeDir, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("mounting a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(runtimeDir, 0); err != nil {
			t.Errorf("unmounting %s: %v", runtimeDir, err)
		}
	})
	policyPath := filepath.Join(dir, "policy.toml")
	writeFile(t, policyPath, testPolicy(""))
	d, err := New(Config{PolicyPath: policyPath, RuntimeDir: runtimeDir, StateDir: filepath.Join(dir, "state"),
		LockFile: filepath.Join(dir, "disks.lock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Signals: make(chan os.Signal)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = d.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("Run = %v, want a refusal naming the read-only runtime directory", err)
	}
	if ctx.Err() != nil {
		t.Error("the daemon ran until its context ended")
	}
}

// TestIntegrationTwoDaemons: a second daemon process on the same runtime
// directory exits non-zero at once, naming the first one's pid, which keeps
// running and stays visible to status. Before, both ran, flapping every disk
// between their policies; when the second exited, status said none ran.
func TestIntegrationTwoDaemons(t *testing.T) {
	requireLoops(t)
	first := startChild(t, testPolicy(""))
	st, err := statefile.Read(first.runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	second := exec.Command(os.Args[0], "-test.run=^$")
	second.Env = append(slices.Clone(first.cmd.Env), "IOSCHED_TEST_STATE_DIR="+t.TempDir()) // the last one counts
	started := time.Now()
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second daemon: %v, want a non-zero exit\n%s", err, out)
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Errorf("the second daemon took %s to exit", took)
	}
	if !strings.Contains(string(out), fmt.Sprintf("pid %d", st.PID)) {
		t.Errorf("the second daemon's error does not name pid %d:\n%s", st.PID, out)
	}
	if _, err := statefile.Read(first.runtimeDir); err != nil {
		t.Errorf("after the second daemon exited, status finds no daemon: %v", err)
	}
}
