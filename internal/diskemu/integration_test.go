package diskemu

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
)

// testLoops is this package's range of loop numbers (internal/looptest).
const testLoops = 7500

// measured is one profile as the integration test serves it, slowed so
// that a read spends 10-20 ms in the device: the rates then stay below
// 4,300 IOPS, which costs the server (built without -race) about a fifth
// of a CPU at most, and a profile's spread over a 3 s point averages out
// to a few per cent.
type measured struct {
	name string
	slow float64
	// credits, when set, replaces the credit bucket's burst: credits are
	// a count, which slowing keeps, so a slowed burst disk would spend them
	// k times later; this many run out in the middle of a point.
	credits float64
	// more are points beyond the four random 4 KiB ones.
	more []point
}

// point is one fio run: rw and bs as fio takes them, and the IOPS the
// profile should give (the model's figure for random reads when nil).
type point struct {
	rw    string
	bs    int
	depth int
	model func(p Profile, path time.Duration) float64
}

var measuredProfiles = []measured{
	{name: "local-nvme", slow: 200},
	{name: "network-ssd", slow: 15, more: []point{{rw: "randread", bs: 128 << 10, depth: 16}}},
	{name: "burst", slow: 10, credits: 324},
	{name: "hdd-network", slow: 2},
	{name: "spinning", slow: 3, more: []point{{rw: "read", bs: 4096, depth: 1,
		// One read after another: no seek, the service time alone.
		model: func(p Profile, path time.Duration) float64 { return 1 / (p.Service.Mean + path).Seconds() }}}},
}

const pointTime = 3 * time.Second

// TestIntegrationProfilesMatchModel runs fio (libaio, O_DIRECT, 4 KiB
// random reads, read-only) at depths 1, 4, 16 and 64 on each profile
// behind a real loop device with direct I/O and holds the IOPS to the
// profile's model within 10%.
//
// The model is the device's; the time a read spends outside it (the loop
// driver, the FUSE round trip, fio's own wake-ups: ~60 us on an idle
// machine, over a millisecond on 2 CPUs busy compiling) is the machine's,
// and is measured, not assumed: at a depth within the profile's
// parallelism no read waits in the device, so fio's mean latency less the
// device's own mean time a read is that path, and the model gets it. At a
// depth beyond the parallelism the slots are busy back to back and the
// path does not count. So at depths within the parallelism the check holds
// the device's service time, its buckets and its slots to the profile.
// Where no bucket limits the rate it also holds the reads the server had
// in service at once to the depth (up to the parallelism): the kernel
// hands the device its reads concurrently, none serialised on the way.
func TestIntegrationProfilesMatchModel(t *testing.T) {
	looptest.Require(t)
	fio, err := exec.LookPath("fio")
	if err != nil {
		looptest.Missing(t, "the emulator is measured with fio (Debian package fio): "+err.Error())
	}
	for i, m := range measuredProfiles {
		p, err := Lookup(m.name)
		if err != nil {
			t.Fatal(err)
		}
		p = p.Slowed(m.slow)
		if m.credits > 0 {
			p.IOPS[len(p.IOPS)-1].Burst = m.credits
		}
		t.Run(m.name, func(t *testing.T) {
			e := Start(t, testLoops+i, p, 8<<30)
			cpu0 := cpuTime(t, e.cmd.Process.Pid)
			prev := e.Refill(t)
			points := []point{{"randread", 4096, 1, nil}, {"randread", 4096, 4, nil}, {"randread", 4096, 16, nil}, {"randread", 4096, 64, nil}}
			for _, pt := range append(points, m.more...) {
				got, lat := runFio(t, fio, e.Name, pt, pointTime)
				st := e.Refill(t)
				reads, in := st.Reads-prev.Reads, st.Inside-prev.Inside
				prev = st
				what := fmt.Sprintf("%s %s %dk depth %d", p.Name, pt.rw, pt.bs>>10, pt.depth)
				if reads == 0 {
					t.Fatalf("%s: the device served no read", what)
				}
				inside := in / time.Duration(reads)
				var path time.Duration
				if pt.depth <= p.Parallel {
					path = max(lat-inside, 0)
				}
				model := pt.model
				if model == nil {
					model = func(p Profile, path time.Duration) float64 { return p.Model(pt.depth, pt.bs, pointTime, path) }
				}
				want := model(p, path)
				t.Logf("%s: %7.1f IOPS, model %7.1f (%+5.1f%%, without the path %7.1f); latency %v, %v of it in the device; %d in service at most",
					what, got, want, 100*(got-want)/want, model(p, 0),
					lat.Round(time.Microsecond), inside.Round(time.Microsecond), st.PeakInService)
				if math.Abs(got-want) > 0.10*want {
					t.Errorf("%s: %.1f IOPS, the model says %.1f: off by more than 10%%", what, got, want)
				}
				unlimited := p
				unlimited.IOPS, unlimited.Bytes = nil, nil
				if unlimited.Model(pt.depth, pt.bs, pointTime, path) == want && st.PeakInService < int64(min(pt.depth, p.Parallel)) {
					t.Errorf("%s: at most %d reads in service at once, want %d: the reads reach the device serialised",
						what, st.PeakInService, min(pt.depth, p.Parallel))
				}
			}
			// The server's CPU over the profile's points: a server that
			// is CPU-bound measures the machine, not the profile.
			t.Logf("%s: the emulator used %v of CPU over %v of reads", p.Name, cpuTime(t, e.cmd.Process.Pid)-cpu0, time.Duration(4+len(m.more))*pointTime)
		})
	}
}

// runFio runs fio's point pt on /dev/name for d and returns its IOPS and
// mean latency.
func runFio(t *testing.T, fio, name string, pt point, d time.Duration) (float64, time.Duration) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fio.json")
	cmd := exec.Command(fio, "--name=emu", "--filename=/dev/"+name, "--readonly", "--rw="+pt.rw,
		"--bs="+strconv.Itoa(pt.bs), "--direct=1", "--ioengine=libaio", "--iodepth="+strconv.Itoa(pt.depth),
		"--time_based", "--runtime="+strconv.FormatInt(d.Milliseconds(), 10)+"ms", "--invalidate=0",
		"--output-format=json", "--output="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fio on %s, %+v: %v\n%s", name, pt, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Jobs []struct {
			Read struct {
				IOPS  float64 `json:"iops"`
				LatNS struct {
					Mean float64 `json:"mean"`
				} `json:"lat_ns"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio's report on %s: %v\n%s", name, err, b)
	}
	return r.Jobs[0].Read.IOPS, time.Duration(r.Jobs[0].Read.LatNS.Mean)
}

// cpuTime is the user and system CPU time process pid has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command (which may hold spaces) in parentheses;
	// utime and stime are the 14th and 15th, in clock ticks (USER_HZ 100).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
