package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers 7450-7489 (see internal/looptest).

type adviceOut struct {
	IntervalS float64 `json:"interval_s"`
	Devices   []struct {
		Name       string   `json:"name"`
		Scheduler  string   `json:"scheduler"`
		IOPS       float64  `json:"iops"`
		ReadIOPS   float64  `json:"read_iops"`
		WriteIOPS  float64  `json:"write_iops"`
		Busy       float64  `json:"busy"`
		QueueDepth float64  `json:"queue_depth"`
		BusyDepth  float64  `json:"busy_depth"`
		LatencyUs  float64  `json:"latency_us"`
		Favoured   *string  `json:"favoured"`
		Gain       *float64 `json:"gain"`
		Basis      string   `json:"basis"`
		Error      string   `json:"error"`
	} `json:"devices"`
}

// advise runs advise --json on one disk and returns what it printed, and
// its warnings.
func advise(t *testing.T, args ...string) (adviceOut, string) {
	t.Helper()
	out, errb, code := runMain(t, append([]string{"advise", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("advise %v: exit %d\n%s%s", args, code, out, errb)
	}
	var a adviceOut
	if err := json.Unmarshal(out, &a); err != nil || len(a.Devices) != 1 {
		t.Fatalf("advise %v: %v\n%s", args, err, out)
	}
	return a, string(errb)
}

// TestIntegrationAdviseDepths drives known depths on a slow loop device
// (each read 1 ms in the device): advise reports the driven depth as the
// busy depth and the reader's own rate as IOPS; with a seeded result
// whose curves cross, at depth 1 it favours mq-deadline, at depth 32 the
// loop's own none, on the seeded curve; a remembered result comes before
// a seeded one; an idle disk gets no verdict.
func TestIntegrationAdviseDepths(t *testing.T) {
	looptest.Require(t)
	l := looptest.AddSlow(t, 7450, 64<<20, time.Millisecond)
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteQueueAttr(l.Name, "scheduler", "none"); err != nil {
		t.Fatal(err)
	}
	dev, err := fs.Device(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seed := filepath.Join(dir, "fleet.json")
	seeded := crossingRecord(probe.KeyOf(fs, dev), time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	// A record of the disk that does not hold together (a candidate
	// measured at other depths than the record's) is not used, and said.
	bad := seeded
	bad.At = bad.At.Add(time.Hour)
	bad.Depths = []int{1, 4}
	b, err := json.Marshal(map[string]any{"version": 1, "results": []probe.Record{bad, seeded}})
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(seed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pol, fmt.Appendf(nil, "[daemon]\nprobe_results = [%q]\n", filepath.Join(dir, "*.json")), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	stat, err := observe.Open(observe.StatPath("/sys", l.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer stat.Close()

	for _, tc := range []struct {
		depth    int
		favoured string
		basis    string
	}{
		{1, "mq-deadline", "the probe measured mq-deadline 1.15x none's IOPS (curve of 2026-11-30, seeded from " + seed + ")"},
		{32, "none", "the probe measured none (the current scheduler) 1.50x mq-deadline's IOPS (curve of 2026-11-30, seeded from " + seed + ")"},
	} {
		r := looptest.StartReader(t, l.Name, tc.depth, 4096)
		eventually.True(t, 10*time.Second, fmt.Sprintf("%d reads in flight", tc.depth), func() bool {
			s, err := stat.Read()
			return err == nil && s.InFlight >= uint64(tc.depth)
		})
		start, before := time.Now(), r.Reads()
		a, warnings := advise(t, "--interval", "1s", "--policy", pol, "--state-dir", state, l.Name)
		driven := float64(r.Reads()-before) / time.Since(start).Seconds()
		r.Stop(t)
		d := a.Devices[0]
		t.Logf("depth %d: %+v; reader %.0f reads/s", tc.depth, d, driven)
		if math.Abs(d.BusyDepth-float64(tc.depth)) > 0.15*float64(tc.depth)+0.2 {
			t.Errorf("depth %d: busy depth %.2f", tc.depth, d.BusyDepth)
		}
		// The reader's rate is taken over a little more than advise's
		// interval (the command's own start and end).
		if d.IOPS < driven*0.9 || d.IOPS > driven*1.25 || d.WriteIOPS != 0 {
			t.Errorf("depth %d: %.0f IOPS (%.0f writes), the reader did %.0f", tc.depth, d.IOPS, d.WriteIOPS, driven)
		}
		if d.Favoured == nil || *d.Favoured != tc.favoured || !strings.Contains(d.Basis, tc.basis) || d.Scheduler != "none" {
			t.Errorf("depth %d: favoured %v, basis %q\nwant %s, %q", tc.depth, d.Favoured, d.Basis, tc.favoured, tc.basis)
		}
		if want := seed + ": result 1 (device loop1): not used: none's curve"; !strings.Contains(warnings, want) || strings.Count(warnings, "\n") != 1 {
			t.Errorf("depth %d: warnings %q, want one: %q", tc.depth, warnings, want)
		}
	}

	// A remembered result (here: the same curves, measured later) comes
	// first; the disk idle now, there is no verdict.
	remembered := seeded
	remembered.At = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	if err := probe.OpenStore(state, nil).Remember(remembered); err != nil {
		t.Fatal(err)
	}
	r := looptest.StartReader(t, l.Name, 32, 4096)
	eventually.True(t, 10*time.Second, "32 reads in flight", func() bool {
		s, err := stat.Read()
		return err == nil && s.InFlight >= 32
	})
	a, _ := advise(t, "--interval", "300ms", "--policy", pol, "--state-dir", state, l.Name)
	d := a.Devices[0]
	r.Stop(t)
	if d.Favoured == nil || *d.Favoured != "none" || !strings.HasSuffix(d.Basis, "(curve of 2026-12-01, remembered)") {
		t.Errorf("with a remembered result: favoured %v, basis %q", d.Favoured, d.Basis)
	}
	a, _ = advise(t, "--interval", "300ms", "--policy", pol, "--state-dir", state, l.Name)
	if d = a.Devices[0]; d.Favoured != nil || d.Gain != nil || d.Basis != "idle: no basis" || d.IOPS != 0 {
		t.Errorf("idle: %+v", d)
	}
}

// TestIntegrationAdviseReaderBound: on a loop device over /dev/shm the
// reader, not the disk, is the bottleneck: io_uring asks for 32 reads in
// flight, the disk's stat shows far fewer, and advise reports what stat
// shows, not the reader's depth.
func TestIntegrationAdviseReaderBound(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7451)
	l.Bind(t, 256<<20)
	eng, err := probe.NewEngine(probe.EngineIOUring)
	if err != nil {
		looptest.Missing(t, "io_uring: "+err.Error())
	}
	fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	stat, err := observe.Open(observe.StatPath("/sys", l.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer stat.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := eng.Run(ctx, &probe.Job{FD: fd, BlockSize: 4096, Depth: 32, Size: 256 << 20, Seed: 1, Deadline: time.Now().Add(time.Minute)})
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually.True(t, 10*time.Second, "reads", func() bool {
		s, err := stat.Read()
		return err == nil && s.ReadIOs > 1000
	})
	a, err := stat.Read()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := advise(t, "--interval", "1s", "--state-dir", t.TempDir(), l.Name)
	d := out.Devices[0]
	b, err := stat.Read()
	if err != nil {
		t.Fatal(err)
	}
	around, err := observe.Between(a, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("advise: %+v; stat around it: %+v", d, around)
	if d.IOPS < 0.7*around.IOPS() || d.IOPS > 1.3*around.IOPS() {
		t.Errorf("advise %.0f IOPS, stat around it %.0f", d.IOPS, around.IOPS())
	}
	if math.Abs(d.BusyDepth-around.BusyDepth) > 0.3*around.BusyDepth+0.5 {
		t.Errorf("advise busy depth %.2f, stat around it %.2f", d.BusyDepth, around.BusyDepth)
	}
	// Measured here: 6 to 19 in flight while busy, as the loop worker
	// keeps up; 2 with fio.
	if d.BusyDepth > 0.8*32 {
		t.Errorf("busy depth %.2f: near the reader's 32, which the disk did not see", d.BusyDepth)
	}
}
