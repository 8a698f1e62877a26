package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/observe"
)

// Loop numbers 7520-7539 (see internal/looptest): the emulated disks
// advise is held to iostat on.
const iostatLoopFirst, iostatLoopLast = 7520, 7539

// iostatProfiles are diskemu's profiles slowed as its own integration test
// slows them, so that the FUSE server keeps up on a machine of 2 CPUs and
// the device, not the machine, sets the rate. The burst disk keeps its
// credits, which last past every window (each point starts with full
// buckets): where the rate steps inside a window, what the two count
// differs by the step times how far apart the two tools' windows open,
// which is the test's doing, not advise's.
var iostatProfiles = []struct {
	name string
	slow float64
}{
	{name: "local-nvme", slow: 200},
	{name: "network-ssd", slow: 15},
	{name: "burst", slow: 10},
	{name: "hdd-network", slow: 2},
	{name: "spinning", slow: 3},
}

// The window advise and iostat both measure, and how long fio runs before
// it so that the reads are at their depth when the window opens.
const (
	iostatWindow = 4 * time.Second
	iostatRamp   = time.Second
)

// iostatPoint is one workload: fio's depth, and whether fio waits the
// disk's mean service time after each read (the disk then idles about
// half the time, so %util and the depth are not simply 100% and the
// depth asked for).
type iostatPoint struct {
	depth int
	think bool
}

// TestIntegrationAdviseAgreesWithIostat drives 4 KiB random reads with
// fio at depths 1 and 16, and at depth 1 with a pause after each read, on
// every emulated cloud disk, and over the same
// seconds runs the built iosched advise --json and sysstat's iostat -x on
// it: IOPS, the mean requests in flight (iostat's aqu-sz) and the busy
// share (%util) agree within 5%. Both read the kernel's counters of the
// disk (/sys/block/DEV/stat and /proc/diskstats give the same ones), so a
// disagreement is advise's arithmetic or its window, not the disk.
func TestIntegrationAdviseAgreesWithIostat(t *testing.T) {
	looptest.Require(t)
	fio, err := exec.LookPath("fio")
	if err != nil {
		looptest.Missing(t, "the emulated disks are driven with fio (Debian package fio): "+err.Error())
	}
	iostat, err := exec.LookPath("iostat")
	if err != nil {
		looptest.Missing(t, "advise is held to iostat (Debian package sysstat): "+err.Error())
	}
	bin := buildIosched(t, false)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range iostatProfiles {
		p, err := diskemu.Lookup(m.name)
		if err != nil {
			t.Fatal(err)
		}
		p = p.Slowed(m.slow)
		t.Run(m.name, func(t *testing.T) {
			e := diskemu.StartIn(t, iostatLoopFirst, iostatLoopLast, p, 8<<30)
			for _, pt := range []iostatPoint{{1, false}, {16, false}, {1, true}} {
				// Full buckets at each point, as a new disk's.
				e.Refill(t)
				var think time.Duration
				what := fmt.Sprintf("%s depth %d", p.Name, pt.depth)
				if pt.think {
					think = p.Service.Mean
					what += fmt.Sprintf(", %v between reads", think)
				}
				adv, ios := measureTogether(t, bin, pol, iostat, fio, e.Name, pt.depth, think)
				t.Logf("%s: advise %.1f IOPS, depth %.3f, busy %.2f%%; iostat %.1f IOPS, aqu-sz %.2f, %%util %.2f",
					what, adv.IOPS, adv.QueueDepth, 100*adv.Busy, ios.IOPS(), ios.AquSz, ios.Util)
				if adv.IOPS == 0 {
					t.Fatalf("%s: advise saw no I/O", what)
				}
				agree(t, what, "IOPS", adv.IOPS, ios.IOPS())
				agree(t, what, "depth (aqu-sz)", adv.QueueDepth, ios.AquSz)
				agree(t, what, "utilisation (%util)", 100*adv.Busy, ios.Util)
				if adv.NoWait == nil || !*adv.NoWait {
					t.Errorf("%s: advise says nowait %v (%s), want true: the loop driver takes NOWAIT reads", what, adv.NoWait, adv.NoWaitNote)
				}
			}
		})
	}
}

// agree fails t when advise's figure a and iostat's b differ by more
// than 5% of the larger.
func agree(t *testing.T, what, figure string, a, b float64) {
	t.Helper()
	if math.Abs(a-b) > 0.05*math.Max(math.Abs(a), math.Abs(b)) {
		t.Errorf("%s: %s: advise %.3f, iostat %.3f: more than 5%% apart", what, figure, a, b)
	}
}

// adviseDevice is one disk of advise --json's output.
type adviseDevice struct {
	Name       string  `json:"name"`
	IOPS       float64 `json:"iops"`
	Busy       float64 `json:"busy"`
	QueueDepth float64 `json:"queue_depth"`
	NoWait     *bool   `json:"nowait"`
	NoWaitNote string  `json:"nowait_note"`
	Error      string  `json:"error"`
}

// iostatDisk is one disk of iostat -x -o JSON's report.
type iostatDisk struct {
	Device string  `json:"disk_device"`
	R      float64 `json:"r/s"`
	W      float64 `json:"w/s"`
	D      float64 `json:"d/s"`
	AquSz  float64 `json:"aqu-sz"`
	Util   float64 `json:"util"`
}

// IOPS is what advise counts: reads and writes. iostat's tps adds
// discards, which fio's reads never make.
func (d iostatDisk) IOPS() float64 { return d.R + d.W }

// measureTogether runs fio at depth on /dev/name, waits until its reads
// reach the disk and for the ramp, then starts advise and iostat over the
// same window, one right after the other, and returns what each saw.
func measureTogether(t *testing.T, bin, pol, iostat, fio, name string, depth int, think time.Duration) (adviseDevice, iostatDisk) {
	t.Helper()
	// fio runs until it is interrupted, well past the window: its own
	// end must never fall inside the window.
	load := exec.Command(fio, "--name=advise", "--filename=/dev/"+name, "--readonly", "--rw=randread",
		"--bs=4096", "--direct=1", "--ioengine=libaio", "--iodepth="+strconv.Itoa(depth),
		"--time_based", "--runtime=600s", "--invalidate=0", "--output=/dev/null")
	if think > 0 {
		load.Args = append(load.Args, "--thinktime="+strconv.FormatInt(think.Microseconds(), 10)+"us", "--thinktime_blocks=1")
	}
	var loadErr bytes.Buffer
	load.Stderr = &loadErr
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = load.Process.Signal(syscall.SIGINT)
		_ = load.Wait()
	}
	defer stop()
	waitReads(t, name, load)
	time.Sleep(iostatRamp)

	interval := strconv.Itoa(int(iostatWindow / time.Second))
	var advOut, advErr, iosOut, iosErr bytes.Buffer
	adv := exec.Command(bin, "--policy", pol, "advise", "--json", "--state-dir", t.TempDir(), "--interval", iostatWindow.String(), name)
	adv.Stdout, adv.Stderr = &advOut, &advErr
	// -y: no report since boot; one report of the window's seconds.
	ios := exec.Command(iostat, "-x", "-y", "-d", "-o", "JSON", name, interval, "1")
	ios.Stdout, ios.Stderr = &iosOut, &iosErr
	ios.Env = append(os.Environ(), "LC_ALL=C", "S_COLORS=never")
	if err := adv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ios.Start(); err != nil {
		t.Fatal(err)
	}
	advWait, iosWait := adv.Wait(), ios.Wait()
	stop()
	if advWait != nil {
		t.Fatalf("iosched advise %s: %v\n%s%s", name, advWait, advOut.Bytes(), advErr.Bytes())
	}
	if iosWait != nil {
		t.Fatalf("iostat %s: %v\n%s%s", name, iosWait, iosOut.Bytes(), iosErr.Bytes())
	}
	var a struct {
		Devices []adviseDevice `json:"devices"`
	}
	if err := json.Unmarshal(advOut.Bytes(), &a); err != nil || len(a.Devices) != 1 || a.Devices[0].Error != "" {
		t.Fatalf("advise's output on %s: %v\n%s", name, err, advOut.Bytes())
	}
	var r struct {
		Sysstat struct {
			Hosts []struct {
				Statistics []struct {
					Disk []iostatDisk `json:"disk"`
				} `json:"statistics"`
			} `json:"hosts"`
		} `json:"sysstat"`
	}
	if err := json.Unmarshal(iosOut.Bytes(), &r); err != nil {
		t.Fatalf("iostat's output on %s: %v\n%s", name, err, iosOut.Bytes())
	}
	for _, h := range r.Sysstat.Hosts {
		for _, s := range h.Statistics {
			for _, d := range s.Disk {
				if d.Device == name {
					return a.Devices[0], d
				}
			}
		}
	}
	t.Fatalf("iostat's output has no %s:\n%s", name, iosOut.Bytes())
	return adviseDevice{}, iostatDisk{}
}

// waitReads returns once the disk has completed reads since it was
// called (fio has started and reaches the disk), or fails t if fio exits.
func waitReads(t *testing.T, name string, load *exec.Cmd) {
	t.Helper()
	d, err := observe.Open(observe.StatPath("/sys", name))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	first, err := d.Read()
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, err := d.Read()
		if err != nil {
			t.Fatal(err)
		}
		if s.ReadIOs > first.ReadIOs {
			return
		}
		// A process that has exited has a wait status; fio that has not
		// is still starting.
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(load.Process.Pid, &ws, syscall.WNOHANG, nil); pid == load.Process.Pid {
			t.Fatalf("fio on %s exited before reading (%v)", name, ws.ExitStatus())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIntegrationAdviseSaysNoNoWait runs advise on a zram disk, whose
// driver takes no NOWAIT I/O, and on a loop device, whose driver does:
// advise says of the zram disk plainly what io_uring does on it, and
// nothing of the loop.
func TestIntegrationAdviseSaysNoNoWait(t *testing.T) {
	looptest.Require(t)
	z := looptest.AddZram(t, 16<<20)
	l := looptest.Add(t, iostatLoopLast)
	l.Bind(t, 16<<20)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--policy", pol, "advise", "--interval", "50ms", "--state-dir", t.TempDir(), z.Name, l.Name}
	out, errb, code := runMain(t, args...)
	if code != 0 {
		t.Fatalf("advise: exit %d\n%s%s", code, out, errb)
	}
	want := z.Name + ": " + noWaitSlowPath + "\n"
	if !bytes.Contains(out, []byte(want)) {
		t.Errorf("advise does not say %q:\n%s", want, out)
	}
	if bytes.Contains(out, []byte(l.Name+": no NOWAIT")) {
		t.Errorf("advise says %s has no NOWAIT support; its driver has:\n%s", l.Name, out)
	}
	out, errb, code = runMain(t, append(args[:3:3], append([]string{"--json"}, args[3:]...)...)...)
	if code != 0 {
		t.Fatalf("advise --json: exit %d\n%s%s", code, out, errb)
	}
	var a struct {
		Devices []adviseDevice `json:"devices"`
	}
	if err := json.Unmarshal(out, &a); err != nil || len(a.Devices) != 2 {
		t.Fatalf("advise --json: %v\n%s", err, out)
	}
	for _, d := range a.Devices {
		want := d.Name == l.Name
		if d.NoWait == nil || *d.NoWait != want {
			t.Errorf("advise --json: %s: nowait %v (%s), want %v", d.Name, d.NoWait, d.NoWaitNote, want)
		}
		if !want && d.NoWaitNote != noWaitSlowPath {
			t.Errorf("advise --json: %s: nowait_note %q, want %q", d.Name, d.NoWaitNote, noWaitSlowPath)
		}
	}
}
