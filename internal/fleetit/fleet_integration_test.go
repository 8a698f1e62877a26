package fleetit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/iosched/iosched/internal/daemon"
	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/fleet"
	"github.com/iosched/iosched/internal/fleetcli"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/promtest"
	"github.com/iosched/iosched/internal/ueventtest"
)

// Loop numbers 43000-43099 (see internal/looptest).

// machine is one of the test's three: a loop device, the daemon that
// manages it, the node_exporter that exports its metrics file, and the
// reader that drives the disk.
type machine struct {
	name string
	loop *looptest.Loop
	// slow: the loop is over a slow FUSE file, not /dev/shm.
	slow bool
	// depth is the reads its reader keeps in flight.
	depth int

	textfile, state, runtime string
	exporter                 *promtest.NodeExporter
	log                      *ueventtest.LogBuffer
	stop                     func() error
}

// probeTable is every daemon's [rule.probe]: a short probe (one round,
// 100 ms a measurement, the curve at 1, 4 and 16), so that it fits its
// budget on the slow loop too, where 16 reads in flight take 32 ms to
// drain. One round, as the fleet only needs each disk's curves: a probe
// of several rounds on a machine this busy (three machines' probes at
// once, on the CPUs their loops and readers share) can find its rate
// stepping between rounds, which rightly decides nothing and exports no
// curve. io_uring: the three daemons share one process, and psync's
// readers would have each raise and restore the process's GOMAXPROCS
// (procs.Raiser, one per process) under the others' probes. And psync's
// 16 readers each need a CPU to see a measurement's end and return,
// which a busy machine delays past the drain the probe's budget counts
// (the disk's own read time, as sized): psync probes of a /dev/shm loop
// can run out of their budget under such load; io_uring's one reader
// needs one CPU for all its reads.
const probeTable = `[rule.probe]
engine = "io_uring"
candidates = ["none", "mq-deadline"]
depths = [1, 4, 16]
depth = 16
duration = "100ms"
rounds = 1
`

// TestIntegrationFleet: three machines, two with a loop over /dev/shm (one
// hardware key), one with a loop over a slow FUSE file (another key), each
// with its own daemon observing its loop every second and probing it
// through its policy's [rule.probe], its node_exporter and reader depth; a
// real Prometheus scrapes the three exporters every second and evaluates
// contrib/prometheus's rules. What iosched fleet reads from it must be
// what the test reads itself: each key's machines and disks, the probe
// store's key, the curves of the probe records the daemons wrote to the
// bit, and the busy time's shares by depth within 5 points of what the
// loops' own stat files say over the same window (time in queue over busy
// time, each second).
//
// IOSCHED_FLEET_REPORT=FILE writes `iosched fleet --json`'s output there
// (contrib/bench/cmd/fleetplot draws it).
func TestIntegrationFleet(t *testing.T) {
	looptest.Require(t)
	start := time.Now()
	rules := rulesEvery(t, time.Second)

	// The daemons and the test each put a second's busy time in the
	// bucket of that second's depth, sampling at nearly the same
	// instants, not the same: a disk whose depth wanders across a
	// bucket's bound is split between the two buckets a little
	// differently by each. So the depths are chosen inside buckets: on
	// /dev/shm a read is in flight about half of its reader's time (the
	// rest is the reader's own CPU), so 6 readers make a depth near 3,
	// and one reader at most 1; the slow disk shows its reader's 3.
	ms := []*machine{
		{name: "a", depth: 1},
		{name: "b", depth: 6},
		{name: "c", depth: 3, slow: true},
	}
	for i, m := range ms {
		dir := t.TempDir()
		m.textfile, m.state, m.runtime = filepath.Join(dir, "textfile"), filepath.Join(dir, "state"), filepath.Join(dir, "run")
		for _, d := range []string{m.textfile, m.state, m.runtime} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if m.slow {
			// A read takes 2 ms in the device: the disk serves one at a
			// time, the rest wait in flight, so the depth its stat shows
			// is the reader's.
			m.loop = looptest.AddSlow(t, 43000+i, 32<<20, 2*time.Millisecond)
		} else {
			m.loop = looptest.Add(t, 43000+i)
			m.loop.Bind(t, 64<<20)
		}
		m.exporter = promtest.StartNodeExporter(t, m.textfile)
	}
	targets := make([]string, len(ms))
	for i, m := range ms {
		targets[i] = m.exporter.Addr
	}
	srv := promtest.StartServer(t, promtest.ServerOptions{Config: promtest.ScrapeConfig(time.Second, []string{rules}, targets...)})
	setUp := time.Now()

	// Each daemon finds no probe record in its state directory: it
	// probes its loop (idle: no reader runs yet), remembers the result
	// in probes.json and exports its curves as "probed".
	for _, m := range ms {
		m.startDaemon(t)
	}
	eventually.True(t, 30*time.Second, "Prometheus has each disk's histogram and the curves its daemon probed", func() bool {
		for _, m := range ms {
			for _, l := range m.log.Lines(`msg="probe `, "device="+m.loop.Name) {
				if !isProbeProgress(l) {
					t.Fatalf("machine %s's probe of %s: %s", m.name, m.loop.Name, l)
				}
			}
		}
		return count(t, srv, `iosched_disk_busy_depth_seconds_count`) == len(ms) &&
			count(t, srv, `count by (instance, disk) (iosched_probe_curve_iops{source="probed"})`) == len(ms)
	})
	probed := time.Now()
	records := map[string]probe.Record{} // by machine, as its daemon wrote it
	for _, m := range ms {
		records[m.name] = recordOf(t, m)
		for _, l := range m.log.Lines(`msg="probe `, "device="+m.loop.Name) {
			t.Logf("machine %s: %s", m.name, l)
		}
	}

	// The probes' reads are the daemons' busy time too (they observe
	// every second), at depths that change within a second and, on the
	// slow loop, sit on the buckets' bounds: the window starts after
	// them. Each disk, idle again, has its busy seconds settle in its
	// metrics file, and Prometheus has scraped that before the window
	// starts. What the probes left in the buckets still shapes increase()
	// at the window's start: it extrapolates each bucket back to the
	// start from its first sample there, but no further than where that
	// bucket's count would reach zero, so a bucket the probes left less
	// in is extrapolated less. That moves at most about a scrape
	// interval's part of the window's busy time (2 points) between
	// buckets.
	windowStart := settle(t, srv, ms)

	// The test's own view of the disks: each loop's stat every second.
	sampler := startSampler(ms)
	var readers []*looptest.Reader
	for _, m := range ms {
		readers = append(readers, looptest.StartReader(t, m.loop.Name, m.depth, 4096))
	}
	time.Sleep(20 * time.Second)
	// The readers stop (Stop is also the cleanup's, which does nothing
	// the second time); the disks are idle after, which the sampler's
	// last seconds see.
	for _, r := range readers {
		r.Stop(t)
	}
	time.Sleep(2 * time.Second)
	want := sampler.stop(t)
	// Prometheus has each disk's final count, as its metrics file says.
	eventually.True(t, 10*time.Second, "Prometheus has the metrics files' final busy time", func() bool {
		for _, m := range ms {
			if scraped(t, srv, m) != final(t, m) {
				return false
			}
		}
		return true
	})
	// The window ends at a whole second (iosched fleet --at takes
	// seconds), at least the minute fleet takes after its start, so
	// that it holds the readers' busy time and none of the probes'.
	// The queries wait until every scrape of a time before it is in (a
	// scrape's timeout is its interval), so that each of them sees the
	// same samples.
	at := time.Now().Truncate(time.Second).Add(time.Second)
	if earliest := windowStart.Add(time.Minute).Truncate(time.Second).Add(time.Second); at.Before(earliest) {
		at = earliest
	}
	window := at.Sub(windowStart).Truncate(time.Second)
	time.Sleep(time.Until(at.Add(2 * time.Second)))
	if n := countAt(t, srv, `count by (instance, disk) (iosched_probe_curve_iops{source="probed"})`, at); n != len(ms) {
		t.Errorf("at the window's end %d disks have probed curves, want %d", n, len(ms))
	}

	rep, err := fleet.Query(context.Background(), srv.API, fleet.Options{Range: window, At: at, MinMachines: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The same, as `iosched fleet` prints it and as JSON.
	args := []string{"--prometheus", srv.URL, "--range", model.Duration(window).String(), "--at", at.UTC().Format(time.RFC3339), "--min-machines", "1"}
	text := runFleet(t, args...)
	t.Logf("iosched fleet %s:\n%s", strings.Join(args, " "), text)
	js := runFleet(t, append(args, "--json")...)
	var fromCLI fleet.Report
	if err := json.Unmarshal([]byte(js), &fromCLI); err != nil {
		t.Fatalf("iosched fleet --json: %v\n%s", err, js)
	}
	if p := os.Getenv("IOSCHED_FLEET_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(fromCLI, *rep) {
		t.Errorf("iosched fleet --json and fleet.Query differ:\n%+v\n%+v", fromCLI, *rep)
	}

	checkKeys(t, rep, ms, records)
	checkCurves(t, rep, ms, records)
	checkShares(t, rep, ms, records, want)
	checkRules(t, srv, ms, records)
	t.Logf("set up %.1fs, the daemons' probes scraped %.1fs later, the window started %.1fs after, %s long; whole test %.1fs",
		setUp.Sub(start).Seconds(), probed.Sub(setUp).Seconds(), windowStart.Sub(probed).Seconds(), window, time.Since(start).Seconds())
}

// rulesEvery is contrib/prometheus's rules evaluated every interval, not
// every minute, so that a test of a minute sees them: only the groups'
// interval changes.
func rulesEvery(t *testing.T, interval time.Duration) string {
	t.Helper()
	b, err := os.ReadFile("../../contrib/prometheus/iosched.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "interval: 1m\n") {
		t.Fatal("contrib/prometheus/iosched.rules.yml: no group with interval: 1m")
	}
	s = strings.ReplaceAll(s, "interval: 1m\n", fmt.Sprintf("interval: %dms\n", interval.Milliseconds()))
	p := filepath.Join(t.TempDir(), "iosched.rules.yml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// recordOf is the probe record m's daemon wrote into its state directory
// (probes.json): one, of its loop, measured as its [rule.probe] asked.
func recordOf(t *testing.T, m *machine) probe.Record {
	t.Helper()
	recs, err := probe.OpenStore(m.state, nil).Records()
	if err != nil || len(recs) != 1 {
		t.Fatalf("machine %s's probe records: %v, %v", m.name, recs, err)
	}
	rec := recs[0]
	if rec.Device != m.loop.Name || rec.Engine != "io_uring" || rec.Rounds != 1 || len(rec.Figures) != 2 || rec.Disturbed != "" {
		t.Fatalf("machine %s's probe record is not its [rule.probe]'s on %s: %+v", m.name, m.loop.Name, rec)
	}
	if err := rec.Check(time.Now()); err != nil {
		t.Fatalf("machine %s's probe record: %v", m.name, err)
	}
	return rec
}

// isProbeProgress tells a daemon's log line of a probe going its way
// (queued, started, decided) from one of a probe that failed, was refused,
// postponed or cancelled, none of which exports curves.
func isProbeProgress(line string) bool {
	for _, msg := range []string{`msg="probe queued`, `msg="probe started"`, `msg="probe decided"`} {
		if strings.Contains(line, msg) {
			return true
		}
	}
	return false
}

// settle waits until each machine's disk, idle, has the same busy seconds
// in its metrics file for two seconds (the daemon samples every second and
// writes the file at most a second later) and Prometheus has scraped
// them, and returns when: a window starting then holds none of the busy
// time before.
func settle(t *testing.T, srv *promtest.Server, ms []*machine) time.Time {
	t.Helper()
	const still = 2 * time.Second
	type seen struct {
		busy  float64
		since time.Time
	}
	last := map[string]seen{}
	eventually.True(t, 20*time.Second, "each disk's busy seconds settled, and scraped", func() bool {
		ok := true
		for _, m := range ms {
			f := final(t, m)
			if s, had := last[m.name]; !had || s.busy != f {
				last[m.name] = seen{f, time.Now()}
				ok = false
				continue
			}
			ok = ok && time.Since(last[m.name].since) >= still && scraped(t, srv, m) == f
		}
		return ok
	})
	return time.Now()
}

// startDaemon runs the machine's daemon in this process until the test
// ends: a policy that observes its loop every second and probes it
// (probeTable), writing the metrics file into the exporter's directory.
func (m *machine) startDaemon(t *testing.T) {
	t.Helper()
	pol := filepath.Join(m.state, "policy.toml")
	text := fmt.Sprintf(`[daemon]
metrics_file = %q
reconcile_interval = "0"

[[rule]]
name = "fleet test %s"
observe = "1s"
[rule.match]
name = %q
%s`, filepath.Join(m.textfile, "iosched.prom"), m.name, m.loop.Name, probeTable)
	if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m.log = &ueventtest.LogBuffer{}
	d, err := daemon.New(daemon.Config{
		PolicyPath:     pol,
		RuntimeDir:     m.runtime,
		StateDir:       m.state,
		Logger:         slog.New(slog.NewTextHandler(m.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Signals:        make(chan os.Signal),
		NoPolicyFollow: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	m.stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return fmt.Errorf("machine %s: the daemon did not stop within 30 s", m.name)
		}
	})
	t.Cleanup(func() {
		if err := m.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("machine %s's daemon log (debug lines left out):\n%s", m.name, m.log.Without("level=DEBUG"))
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("machine %s: the daemon stopped before it was ready: %v\n%s", m.name, err, m.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("machine %s: the daemon was not ready within 30 s\n%s", m.name, m.log.String())
	}
}

// count is the number of series query gives now.
func count(t *testing.T, srv *promtest.Server, query string) int {
	t.Helper()
	return countAt(t, srv, query, time.Now())
}

// countAt is the number of series query gives at a time.
func countAt(t *testing.T, srv *promtest.Server, query string, at time.Time) int {
	t.Helper()
	v, _, _, err := srv.API.Query(context.Background(), query, at)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	vec, _ := v.(model.Vector)
	return len(vec)
}

// scraped is the busy seconds of m's disk Prometheus holds now; -1 when
// none.
func scraped(t *testing.T, srv *promtest.Server, m *machine) float64 {
	t.Helper()
	q := fmt.Sprintf(`iosched_disk_busy_depth_seconds_count{instance=%q,disk=%q}`, m.exporter.Addr, m.loop.Name)
	v, _, _, err := srv.API.Query(context.Background(), q, time.Now())
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	vec, _ := v.(model.Vector)
	if len(vec) != 1 {
		return -1
	}
	return float64(vec[0].Value)
}

// final is the busy seconds m's metrics file holds now, as written
// (promtest.Value would give a histogram's count as an integer); -2 when
// there is none.
func final(t *testing.T, m *machine) float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.textfile, "iosched.prom"))
	if err != nil {
		t.Fatal(err)
	}
	promtest.Parse(t, b)
	// The disk's labels come first, the others (its key) after.
	prefix := fmt.Sprintf("iosched_disk_busy_depth_seconds_count{disk=%q", m.loop.Name)
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, prefix); ok && (rest[0] == ',' || rest[0] == '}') {
			_, v, _ := strings.Cut(rest, "} ")
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q", m.textfile, line)
			}
			return f
		}
	}
	return -2
}

func runFleet(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := fleetcli.Main(args, &out, &errb); code != 0 {
		t.Fatalf("iosched fleet %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String()
}

// keyOf is the key of m's probe record, as the metrics write it.
func keyOf(records map[string]probe.Record, m *machine) string {
	return records[m.name].Key.String()
}

// byKey groups the machines by their records' keys.
func byKey(ms []*machine, records map[string]probe.Record) map[string][]*machine {
	out := map[string][]*machine{}
	for _, m := range ms {
		k := keyOf(records, m)
		out[k] = append(out[k], m)
	}
	return out
}

// checkKeys: one key per kind of disk, the probe store's, with its
// machines and disks.
func checkKeys(t *testing.T, rep *fleet.Report, ms []*machine, records map[string]probe.Record) {
	t.Helper()
	groups := byKey(ms, records)
	if len(groups) != 2 {
		t.Fatalf("the probe records have %d keys, want 2 (one for the /dev/shm loops, one for the slow one): %v", len(groups), groups)
	}
	got := map[string]fleet.Key{}
	for _, k := range rep.Keys {
		got[k.Key] = k
	}
	if len(got) != len(groups) {
		t.Errorf("fleet has keys %v, the probe records %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(groups)))
	}
	for key, g := range groups {
		k, ok := got[key]
		if !ok {
			t.Errorf("fleet has no key %s (the probe store's)", key)
			continue
		}
		if k.Machines != len(g) || k.Disks != len(g) {
			t.Errorf("%s: %d machines, %d disks; want %d and %d", key, k.Machines, k.Disks, len(g), len(g))
		}
	}
}

// checkCurves: each key's curves are its machines' records' curves: the
// median of the machines' figures at each depth (the mean of the two
// middle ones, as fleet and PromQL take it), the least and the greatest,
// to the bit.
func checkCurves(t *testing.T, rep *fleet.Report, ms []*machine, records map[string]probe.Record) {
	t.Helper()
	for _, k := range rep.Keys {
		// want[scheduler][depth] are the machines' figures.
		want := map[string]map[int][]float64{}
		for _, m := range byKey(ms, records)[k.Key] {
			for _, c := range records[m.name].Figures {
				if len(c.Curve) == 0 {
					t.Errorf("%s's record of %s has no curve", m.name, c.Name())
				}
				for _, p := range c.Curve {
					if want[c.Name()] == nil {
						want[c.Name()] = map[int][]float64{}
					}
					want[c.Name()][p.Depth] = append(want[c.Name()][p.Depth], p.IOPS)
				}
			}
		}
		if len(k.Curves) != len(want) {
			t.Errorf("%s: curves of %d schedulers, the records have %d", k.Key, len(k.Curves), len(want))
		}
		for _, c := range k.Curves {
			var depths []int
			for _, p := range c.Points {
				depths = append(depths, p.Depth)
				vals := slices.Sorted(slices.Values(want[c.Scheduler][p.Depth]))
				if len(vals) == 0 {
					t.Errorf("%s: %s at depth %d: no record has it", k.Key, c.Scheduler, p.Depth)
					continue
				}
				med := vals[len(vals)/2]
				if len(vals)%2 == 0 {
					med = (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
				}
				if p.Median != med || p.Min != vals[0] || p.Max != vals[len(vals)-1] || p.Machines != len(vals) {
					t.Errorf("%s: %s at depth %d: median %v min %v max %v over %d machines; the records give %v (%v)",
						k.Key, c.Scheduler, p.Depth, p.Median, p.Min, p.Max, p.Machines, med, vals)
				}
			}
			if !slices.Equal(depths, slices.Sorted(maps.Keys(want[c.Scheduler]))) {
				t.Errorf("%s: %s at depths %v, the records at %v", k.Key, c.Scheduler, depths, slices.Sorted(maps.Keys(want[c.Scheduler])))
			}
		}
	}
}

// checkShares: each key's busy time by depth is what the loops' stat
// files say, within 5 percentage points in every bucket.
func checkShares(t *testing.T, rep *fleet.Report, ms []*machine, records map[string]probe.Record, stat map[string]*observe.Depths) {
	t.Helper()
	for _, k := range rep.Keys {
		var sum [len(observe.DepthBounds) + 1]float64
		total := 0.0
		for _, m := range byKey(ms, records)[k.Key] {
			d := stat[m.name]
			for i, b := range d.Busy {
				sum[i] += b
				total += b
			}
			t.Logf("%s (machine %s, %d reads in flight): stat says %.1f busy seconds, %.2f in flight while busy",
				m.loop.Name, m.name, m.depth, d.Count(), d.Sum/d.Count())
		}
		if total == 0 || len(k.Depths) != len(sum) {
			t.Errorf("%s: %d depth buckets, stat's busy time %v", k.Key, len(k.Depths), total)
			continue
		}
		var shares []string
		for i, ds := range k.Depths {
			want := sum[i] / total
			if math.Abs(ds.Share-want) > 0.05 {
				t.Errorf("%s: bucket le=%v has %.1f%% of busy time; the stat files say %.1f%%", k.Key, ds.Le, 100*ds.Share, 100*want)
			}
			if ds.Share > 0 || want > 0 {
				shares = append(shares, fmt.Sprintf("le=%v %.1f%%/%.1f%%", ds.Le, 100*ds.Share, 100*want))
			}
		}
		t.Logf("%s: fleet %.1f busy seconds, stat %.1f; shares fleet/stat: %s", k.Key, k.BusyHours*3600, total, strings.Join(shares, ", "))
	}
}

// checkRules: the recording rules of contrib/prometheus give each key's
// shares and median curves.
func checkRules(t *testing.T, srv *promtest.Server, ms []*machine, records map[string]probe.Record) {
	t.Helper()
	for key := range byKey(ms, records) {
		for _, q := range []string{
			fmt.Sprintf(`iosched_key:busy_depth_share:ratio1h{key=%q,le="+Inf"}`, key),
			fmt.Sprintf(`iosched_key:probe_curve_iops:median{key=%q}`, key),
		} {
			if n := count(t, srv, q); n == 0 {
				t.Errorf("the recording rules give no series: %s", q)
			}
		}
	}
}

// sampler reads each machine's loop's stat file every second, as the
// test's own account of the disks: each interval's busy time (io_ticks)
// goes to the bucket of its depth (time in queue over io_ticks). The
// first reading is taken when it starts, the last when it stops.
type sampler struct {
	stopc chan struct{}
	done  chan struct{}
	got   map[string]*observe.Depths
	err   error
}

func startSampler(ms []*machine) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{}), got: map[string]*observe.Depths{}}
	paths := map[string]string{}
	for _, m := range ms {
		paths[m.name] = filepath.Join("/sys/block", m.loop.Name, "stat")
		s.got[m.name] = &observe.Depths{}
	}
	read := func() (map[string][2]uint64, error) {
		out := map[string][2]uint64{}
		for name, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			f := strings.Fields(string(b))
			if len(f) < 11 {
				return nil, fmt.Errorf("%s: %q", p, b)
			}
			io, err1 := strconv.ParseUint(f[9], 10, 64)
			queue, err2 := strconv.ParseUint(f[10], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: %q", p, b)
			}
			out[name] = [2]uint64{io, queue}
		}
		return out, nil
	}
	go func() {
		defer close(s.done)
		last, err := read()
		if err != nil {
			s.err = err
			return
		}
		for {
			// Each whole second, as the daemons sample (an interval's
			// multiples): a depth that wanders across a bucket's bound
			// from one second to the next is then split between the
			// buckets as the daemons split it.
			stopping := false
			timer := time.NewTimer(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
			select {
			case <-timer.C:
			case <-s.stopc:
				timer.Stop()
				stopping = true
			}
			now, err := read()
			if err != nil {
				s.err = err
				return
			}
			for name, v := range now {
				io, queue := v[0]-last[name][0], v[1]-last[name][1]
				if io == 0 {
					continue
				}
				busy := float64(io) / 1000
				depth := float64(queue) / float64(io)
				d := s.got[name]
				d.Busy[observe.Bucket(depth)] += busy
				d.Sum += depth * busy
			}
			last = now
			if stopping {
				return
			}
		}
	}()
	return s
}

func (s *sampler) stop(t *testing.T) map[string]*observe.Depths {
	t.Helper()
	close(s.stopc)
	<-s.done
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.got
}
