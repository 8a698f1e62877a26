package kubernetes

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
)

// The loop numbers this test creates (see the range table in looptest).
const podTestLoop = 42000

// kubeletConfigMap lays out data the way kubelet mounts a ConfigMap: each
// key a link to ..data/KEY, ..data a link to a timestamped directory.
func kubeletConfigMap(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_30_00_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The daemon runs as the DaemonSet runs it, and a disk hot-plugged after it
// started gets its policy: in a network namespace of its own (no
// hostNetwork), uid 0 with CAP_NET_ADMIN as its only capability and no new
// privileges, the host's /sys bind-mounted at another path (--sysfs), an
// empty /dev, and the policy in a kubelet-style ConfigMap directory.
func TestDaemonAsThePodRunsIt(t *testing.T) {
	looptest.Require(t)
	for _, tool := range []string{"unshare", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (Debian package util-linux / mount): %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "iosched")
	build := exec.Command("go", "build", "-o", bin, "./cmd/iosched")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	name := looptest.Name(podTestLoop)
	policyDir := kubeletConfigMap(t, map[string]string{"50-test.toml": `
[[rule]]
name = "pod test loop: mq-deadline"
[rule.match]
name = "` + name + `"
[rule.set]
scheduler = "mq-deadline"
`})
	hostSys, emptyDev, state, run := filepath.Join(dir, "host-sys"), filepath.Join(dir, "dev"), filepath.Join(dir, "state"), filepath.Join(dir, "run")
	for _, d := range []string{hostSys, emptyDev, state, run} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// unshare and sh exec, so the pid is the daemon's.
	cmd := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind /sys "$1" && exec setpriv --bounding-set=-all,+net_admin --inh-caps=-all --no-new-privs -- "$2" daemon --sysfs="$1" --dev="$3" --policy="$4" --state-dir="$5" --runtime-dir="$6"`,
		"sh", hostSys, bin, emptyDev, policyDir, state, run)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// stop ends the daemon; its log may be read only after (the buffer
	// is written by exec's copying goroutine until the process exits).
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	}()

	// Ready once state.json is there (written after the start-up scan).
	waitFor(t, 10*time.Second, "state.json", func() bool {
		_, err := os.Stat(filepath.Join(run, "state.json"))
		return err == nil
	}, done)

	pid := cmd.Process.Pid
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	// CAP_NET_ADMIN is bit 12.
	if !strings.Contains(string(status), "CapEff:\t0000000000001000\n") || !strings.Contains(string(status), "NoNewPrivs:\t1\n") {
		t.Fatalf("the daemon does not run with CAP_NET_ADMIN alone and no new privileges:\n%s", status)
	}
	own, _ := os.Readlink("/proc/self/ns/net")
	its, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
	if err != nil || its == own {
		t.Fatalf("the daemon's network namespace %q (%v) is not its own (ours %q)", its, err, own)
	}

	looptest.Add(t, podTestLoop)
	sched := filepath.Join("/sys/block", name, "queue/scheduler")
	waitFor(t, 10*time.Second, name+" on mq-deadline", func() bool {
		b, err := os.ReadFile(sched)
		return err == nil && strings.Contains(string(b), "[mq-deadline]")
	}, done)
	stop()
	if !strings.Contains(log.String(), "msg=set device="+name+" attribute=scheduler") {
		t.Errorf("the daemon's log has no set line for %s", name)
	}
}

// waitFor polls cond until it holds, the daemon exits, or timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, done chan error) {
	t.Helper()
	exited := func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("waiting for %s: the daemon exited: %v", what, err)
		default:
		}
		return false
	}
	eventually.True(t, timeout, what, func() bool { return exited() || cond() })
}
