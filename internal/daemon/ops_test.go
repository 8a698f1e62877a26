package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/iosched/iosched/internal/promtest"
	"github.com/iosched/iosched/internal/ueventtest"
)

// metricsFile parses the metrics file as node_exporter's textfile collector
// does; nil while it does not exist.
func metricsFile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return promtest.Parse(t, b)
}

// sample is the value of name's sample whose labels include want (a
// histogram's count), -1 when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	if v, ok := promtest.Value(fams, name, want); ok {
		return v
	}
	return -1
}

// The daemon counts its work into the metrics file the policy names, shows
// the last burst's latency in its state, and follows metrics_file across a
// reload.
func TestDaemonWritesMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.prom"), filepath.Join(dir, "b.prom")
	pol := func(path string) string { return testPolicy("") + fmt.Sprintf("\n[daemon]\nmetrics_file = %q\n", path) }
	r, c := fakeDaemon(t, pol(first), "loop20000")

	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "nr_requests", "64")
	var fams map[string]*dto.MetricFamily
	waitFor(t, 5*time.Second, "the metrics file to count the uevent and its disk", func() bool {
		fams = metricsFile(t, first)
		return sample(fams, "iosched_uevents_total", map[string]string{"action": "add", "source": "kernel"}) == 1 &&
			sample(fams, "iosched_uevent_to_applied_seconds", nil) == 1 &&
			sample(fams, "iosched_disks_managed", map[string]string{"class": "loop", "scheduler": "mq-deadline"}) == 2
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"iosched_changes_total", map[string]string{"attribute": "scheduler", "rule": "daemon test loops"}, 2},
		{"iosched_changes_total", map[string]string{"attribute": "nr_requests", "rule": "daemon test loops"}, 2},
		{"iosched_rescans_total", map[string]string{"reason": "start"}, 1},
		{"iosched_uevent_overflows_total", nil, 0},
	} {
		if got := sample(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	waitFor(t, 5*time.Second, "the state to show the last burst", func() bool {
		st := r.state(t)
		return st.LastBurst != nil && st.LastBurst.Disks == 1 && st.LastBurst.P99 > 0 && st.Metrics != nil && st.Metrics.File == first
	})

	// Drift repaired counts as such.
	writeFile(t, filepath.Join(r.d.cfg.FS.Root(), "devices/virtual/block/loop20000/queue/nr_requests"), "128\n")
	r.signals <- syscall.SIGUSR1
	r.waitAttr(t, "loop20000", "nr_requests", "64")
	waitFor(t, 5*time.Second, "the drift repair and the reconcile to be counted", func() bool {
		fams = metricsFile(t, first)
		return sample(fams, "iosched_drift_repairs_total", map[string]string{"attribute": "nr_requests"}) == 1 &&
			sample(fams, "iosched_rescans_total", map[string]string{"reason": "reconcile"}) == 1
	})

	// A reload moves the file; the counts go on.
	writeFile(t, r.policy, pol(second))
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the metrics file named by the reloaded policy", func() bool {
		fams = metricsFile(t, second)
		return sample(fams, "iosched_last_reload_success", nil) == 1 &&
			sample(fams, "iosched_rescans_total", map[string]string{"reason": "reload"}) == 1 &&
			sample(fams, "iosched_uevents_total", map[string]string{"action": "add", "source": "kernel"}) == 1
	})
}

// Without metrics_file no writer runs and no file appears, but the state
// still shows the last burst.
func TestDaemonWithoutMetricsFile(t *testing.T) {
	t.Parallel()
	r, c := fakeDaemon(t, testPolicy(""), "loop20000")
	addFakeDisk(t, r.d.cfg.FS.Root(), "loop20001", 1)
	c.Msgs <- ueventtest.Msg{B: ueventtest.KernelMsg("add", "loop20001", "disk")}
	r.waitAttr(t, "loop20001", "nr_requests", "64")
	waitFor(t, 5*time.Second, "the state to show the last burst", func() bool {
		st := r.state(t)
		return st.LastBurst != nil && st.LastBurst.Disks == 1
	})
	if r.d.metricsWriting || r.state(t).Metrics != nil {
		t.Errorf("a metrics writer without metrics_file")
	}
}

// kubeletDir lays out a ConfigMap volume as kubelet does: the keys are
// symlinks to ..data/KEY, ..data a symlink to a timestamped directory
// holding the files.
func kubeletDir(t *testing.T, policyText string) string {
	t.Helper()
	dir := t.TempDir()
	kubeletSwap(t, dir, 0, policyText)
	if err := os.Symlink(filepath.Join("..data", "policy.toml"), filepath.Join(dir, "policy.toml")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// kubeletSwap is kubelet's update (pkg/volume/util/atomic_writer.go): a new
// timestamped directory, a ..data_tmp symlink to it renamed over ..data,
// the old directory removed.
func kubeletSwap(t *testing.T, dir string, n int, policyText string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..2026_11_30_17_00_%02d.%09d", n, n))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "policy.toml"), policyText)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// The daemon follows a ConfigMap volume by itself: kubelet's swap to a new
// policy reloads it, a swap to a broken one is refused (the old policy stays
// in force; status, log and metrics say why), and the next good one is taken.
func TestDaemonFollowsKubeletConfigMap(t *testing.T) {
	t.Parallel()
	metricsPath := filepath.Join(t.TempDir(), "iosched.prom")
	pol := func(nr int) string {
		return strings.Replace(testPolicy(""), "nr_requests = 64", fmt.Sprintf("nr_requests = %d", nr), 1) +
			fmt.Sprintf("\n[daemon]\nmetrics_file = %q\n", metricsPath)
	}
	kube := kubeletDir(t, pol(64))
	r, _ := fakeDaemonWith(t, "", func(cfg *Config) {
		cfg.PolicyPath = kube
		cfg.NoPolicyFollow = false
		cfg.hooks.policyDebounce = 50 * time.Millisecond
	}, "loop20000")
	r.waitAttr(t, "loop20000", "nr_requests", "64")
	if !r.state(t).PolicyFollowed {
		t.Fatal("the state does not say the policy is followed")
	}

	kubeletSwap(t, kube, 1, pol(32))
	r.waitAttr(t, "loop20000", "nr_requests", "32")
	waitFor(t, 5*time.Second, "the reload to be recorded", func() bool {
		st := r.state(t)
		return st.LastReload != nil && st.LastReload.OK && st.LastReload.Done
	})

	kubeletSwap(t, kube, 2, pol(32)+"\n[[rule]]\nname = \"broken\"\n[rule.set]\nreadahead_kb = 1\n")
	waitFor(t, 5*time.Second, "the broken policy to be refused", func() bool {
		st := r.state(t)
		return st.LastReload != nil && !st.LastReload.OK && len(st.LastReload.Errors) == 1 && strings.Contains(st.LastReload.Errors[0], "readahead_kb")
	})
	waitFor(t, 5*time.Second, "the metrics to count the load error", func() bool {
		fams := metricsFile(t, metricsPath)
		return sample(fams, "iosched_policy_load_errors_total", nil) == 1 && sample(fams, "iosched_last_reload_success", nil) == 0
	})
	// The old policy is in force: a reconcile finds nothing to change.
	mark := r.writes.Len()
	asked := time.Now()
	r.signals <- syscall.SIGUSR1
	waitFor(t, 5*time.Second, "the state to show the reconcile", func() bool {
		s := r.state(t).LastScan
		return s != nil && s.Reason == "reconcile" && !s.At.Before(asked)
	})
	if got, w := r.attr(t, "loop20000", "nr_requests"), r.writes.Since(mark); got != "32" || len(w) != 0 {
		t.Errorf("after a refused policy: nr_requests %s, writes %v", got, w)
	}

	kubeletSwap(t, kube, 3, pol(16))
	r.waitAttr(t, "loop20000", "nr_requests", "16")
	waitFor(t, 5*time.Second, "the third reload, good, in the state", func() bool {
		st := r.state(t)
		return st.LastReload != nil && st.LastReload.Seq == 3 && st.LastReload.OK && st.LastError == nil
	})
}

// In udev mode, a daemon in a network namespace of its own refuses to
// start, and says what to do.
func TestUdevModeRefusedInPrivateNetworkNamespace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	writeFile(t, policyPath, testPolicy(""))
	var log bytes.Buffer
	fd := newFakeDialer(ueventtest.NewConn())
	d, err := New(Config{
		PolicyPath: policyPath, FS: fakeTree(t, "loop20000"), UeventSource: "udev",
		RuntimeDir: filepath.Join(dir, "run"), StateDir: filepath.Join(dir, "state"),
		LockFile: filepath.Join(dir, "disks.lock"),
		Logger:   slog.New(slog.NewTextHandler(&log, nil)),
		Signals:  make(chan os.Signal), NoPolicyFollow: true,
		hooks: hooks{dial: fd.dial, privateNetNS: func() (bool, string) { return true, "test" }},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(context.Background())
	if !errors.Is(err, ErrUdevUnreachable) || !strings.Contains(err.Error(), "/usr/share/iosched/udev-mode.conf") || !strings.Contains(err.Error(), `uevent_source = "kernel"`) {
		t.Errorf("Run = %v", err)
	}
	if fd.Count() != 0 {
		t.Errorf("the refused daemon opened %d uevent sockets", fd.Count())
	}
	if got := readFake(t, d.cfg.FS, "loop20000", "scheduler"); got != "none" {
		t.Errorf("the refused daemon wrote: scheduler %s", got)
	}
}
