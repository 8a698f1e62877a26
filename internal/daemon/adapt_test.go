package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// crossingDepths are the probe depths of the seeded curves: the disk's
// own (observed) depths too.
var crossingDepths = []int{1, 2, 8, 32}

// crossingFigures are two candidates whose curves cross: mq-deadline ahead
// by 15% at depths 1 and 2, none ahead by 50% from depth 8 (loop devices
// favour none at every depth, so the crossing is seeded).
func crossingFigures() []probe.Candidate {
	curve := func(iops ...float64) []probe.CurvePoint {
		pts := make([]probe.CurvePoint, len(iops))
		for i, v := range iops {
			d := crossingDepths[i]
			pts[i] = probe.CurvePoint{Depth: d, ObservedDepth: float64(d), IOPS: v, P50us: 1e6 / v * float64(d), P99us: 2e6 / v * float64(d)}
		}
		return pts
	}
	cand := func(name string, c []probe.CurvePoint) probe.Candidate {
		f := probe.Figures{IOPS: c[len(c)-1].IOPS, P99us: 100, QD1IOPS: c[0].IOPS, QD1P99: 50}
		return probe.Candidate{Scheduler: name, Figures: f, Curve: c,
			Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f, Curve: c}}}
	}
	return []probe.Candidate{
		cand("none", curve(1000, 1000, 1500, 1500)),
		cand("mq-deadline", curve(1150, 1150, 1000, 1000)),
	}
}

// seedCrossing writes a seeded probe result for dev (read whole from fs)
// with figs, measured as adaptivePolicy's rule probes, and returns the glob
// for probe_results.
func seedCrossing(t testing.TB, fs sysfs.FS, name string, figs []probe.Candidate) string {
	t.Helper()
	dev, err := fs.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fleet := probe.OpenStore(filepath.Join(dir, "fleet"), nil)
	if err := fleet.Remember(probe.Record{
		Key: probe.KeyOf(fs, dev), Device: name, At: time.Now().Add(-time.Hour),
		Method: probe.Method{Engine: probe.EnginePsync, Depth: 32, BlockSize: 4096, Depths: crossingDepths, Candidates: []string{"none", "mq-deadline"}},
		Rounds: 1, Figures: figs,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Export(filepath.Join(dir, "seeds", "fleet.json")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "seeds", "*.json")
}

// adaptivePolicy probes name (its result seeded from seeds) and adapts it
// with windows of seconds; extra goes in [rule.adapt], daemon in [daemon].
func adaptivePolicy(name, seeds, sampleEvery, window, extra, daemon string) string {
	return fmt.Sprintf(`
[[rule]]
name = "adaptive"
[rule.match]
name = [%q]
[rule.set]
nr_requests = 64
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
depth = 32
depths = [1, 2, 8, 32]
[rule.adapt]
sample = %q
window = %q
min_interval = "0s"
guard = false
%s
[daemon]
probe_results = [%q]
%s
`, name, sampleEvery, window, extra, seeds, daemon)
}

// fakeLoad keeps a fake disk's stat file counting as a disk at a depth
// would: IOPS reads a second, each depth/IOPS long, the disk busy all the
// time (depth 0: idle). It rewrites the file in place, with fields of a
// fixed width, as the daemon holds it open.
type fakeLoad struct {
	mu    sync.Mutex
	depth float64
	iops  float64
	stop  chan struct{}
	done  chan struct{}
}

func startFakeLoad(t *testing.T, fs sysfs.FS, name string, iops float64) *fakeLoad {
	t.Helper()
	path := filepath.Join(fs.Root(), "block", name, "stat")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLoad{iops: iops, stop: make(chan struct{}), done: make(chan struct{})}
	write := func(reads, readMs, ioMs, queueMs float64) {
		line := fmt.Sprintf("%12d %12d %12d %12d %12d %12d %12d %12d %12d %12d %12d\n",
			uint64(reads), 0, uint64(reads)*8, uint64(readMs), 0, 0, 0, 0, 0, uint64(ioMs), uint64(queueMs))
		if _, err := f.WriteAt([]byte(line), 0); err != nil {
			t.Error(err)
		}
	}
	write(0, 0, 0, 0)
	go func() {
		defer close(l.done)
		defer f.Close()
		var reads, readMs, ioMs, queueMs float64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-l.stop:
				return
			case now := <-tick.C:
				ms := float64(now.Sub(last)) / float64(time.Millisecond)
				last = now
				l.mu.Lock()
				depth, iops := l.depth, l.iops
				l.mu.Unlock()
				if depth > 0 {
					n := iops * ms / 1000
					reads += n
					readMs += n * depth / iops * 1000
					ioMs += ms
					queueMs += depth * ms
				}
				write(reads, readMs, ioMs, queueMs)
				kernelScheduler(t, fs, name)
			}
		}
	}()
	t.Cleanup(func() {
		close(l.stop)
		<-l.done
	})
	return l
}

// kernelScheduler makes a fake disk's scheduler file read as the kernel's
// does after a write of one name: every scheduler offered, the active one
// in brackets. Replaced whole, so a reader never sees half of it.
func kernelScheduler(t *testing.T, fs sysfs.FS, name string) {
	path := filepath.Join(fs.Root(), "block", name, "queue", "scheduler")
	b, err := os.ReadFile(path)
	if err != nil || len(strings.Fields(string(b))) != 1 || strings.Contains(string(b), "[") {
		return
	}
	active := strings.TrimSpace(string(b))
	var line []string
	for _, s := range []string{"none", "mq-deadline", "kyber"} {
		if s == active {
			s = "[" + s + "]"
		}
		line = append(line, s)
	}
	replaceFile(t, path, strings.Join(line, " ")+"\n")
}

// replaceFile replaces path whole with text.
func replaceFile(t testing.TB, path, text string) {
	tmp := fmt.Sprintf("%s.%d.new", path, time.Now().UnixNano())
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// waitKernelScheduler waits until kernelScheduler has made the disk's
// scheduler file read as the kernel's again after a write.
func waitKernelScheduler(t *testing.T, fs sysfs.FS, name string) {
	t.Helper()
	waitFor(t, 5*time.Second, name+"'s scheduler file as the kernel writes it", func() bool {
		b, err := os.ReadFile(filepath.Join(fs.Root(), "block", name, "queue", "scheduler"))
		return err == nil && strings.Contains(string(b), "[")
	})
}

func (l *fakeLoad) set(depth float64) {
	l.mu.Lock()
	l.depth = depth
	l.mu.Unlock()
}

// setIOPS changes the reads a second the disk serves (a credit cliff).
func (l *fakeLoad) setIOPS(iops float64) {
	l.mu.Lock()
	l.iops = iops
	l.mu.Unlock()
}

// scheduler is the disk's scheduler setting in the state, and its rule.
func schedulerSetting(ds *statefile.DiskState) (value, rule string) {
	if ds == nil {
		return "", ""
	}
	for _, s := range ds.Settings {
		if s.Attribute == "scheduler" {
			return s.Value, s.Rule
		}
	}
	return "", ""
}

// TestAdaptSwitchOnAFakeDisk: on a fake disk whose stat file counts a
// load at depth 1, the seeded curves' crossing switches it from the
// probe's winner (none) to mq-deadline, once, with the switch's reason as
// the setting's provenance in the log, the state and status; the metrics
// count it and show the depth. Drift repair puts the adaptive choice back,
// a reload that changes nothing of the disk's rule keeps it (and the
// controller's history), and one that changes the rule's options starts
// again from the probe's decision.
func TestAdaptSwitchOnAFakeDisk(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	load := startFakeLoad(t, fs, "loop20000", 1000)
	seeds := seedCrossing(t, fs, "loop20000", crossingFigures())
	prom := filepath.Join(t.TempDir(), "iosched.prom")
	daemonTable := fmt.Sprintf("metrics_file = %q", prom)
	pol := adaptivePolicy("loop20000", seeds, "100ms", "500ms", "", daemonTable)
	var mu sync.Mutex
	var switches []string
	r, _ := fakeDaemonWith(t, pol, func(c *Config) {
		c.FS = fs
		c.hooks.adaptSampled = func(name string, p observe.Point, dec adapt.Decision, sched string) {
			if dec.Switch {
				mu.Lock()
				switches = append(switches, dec.From+"->"+dec.To)
				mu.Unlock()
			}
		}
	}, "loop20000")
	if got := r.attr(t, "loop20000", "scheduler"); got != "none" {
		t.Fatalf("scheduler at the start = %s, want the probe's winner none", got)
	}
	load.set(1)
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	const reason = "adapt: busy depth 1 over 500ms; curve: mq-deadline 1.15x none at depth 1"
	if d := applytest.Diff(r.writes.Of("loop20000", "scheduler"), []applytest.Write{applytest.W("loop20000", "scheduler", "mq-deadline")}); d != "" {
		t.Errorf("the switch, written once: %s", d)
	}
	var ds *statefile.DiskState
	waitFor(t, 5*time.Second, "the switch in the state file", func() bool {
		ds = r.state(t).Disks["loop20000"]
		v, rule := schedulerSetting(ds)
		return v == "mq-deadline" && rule == "adaptive ("+reason+")" && ds.Adapt != nil && ds.Adapt.LastSwitch != nil
	})
	a := ds.Adapt
	if a.Scheduler != "mq-deadline" || a.Rule != "adaptive" || a.LastSwitch.From != "none" || a.LastSwitch.To != "mq-deadline" ||
		a.LastSwitch.Reason != reason || a.SwitchesToday != 1 || a.Sample != "100ms" || a.Window != "500ms" {
		t.Errorf("adaptive state %+v, last switch %+v", a, a.LastSwitch)
	}
	waitFor(t, 5*time.Second, "the switch and the depth in the metrics", func() bool {
		fams := metricsFile(t, prom)
		d := sample(fams, "iosched_adapt_busy_depth", map[string]string{"disk": "loop20000"})
		return sample(fams, "iosched_adapt_switches_total", map[string]string{"scheduler": "mq-deadline", "guard": "false"}) == 1 &&
			sample(fams, "iosched_changes_total", map[string]string{"attribute": "scheduler", "rule": "adaptive (adapt)"}) == 1 &&
			d > 0.9 && d < 1.1
	})

	// Drift: the adaptive choice is what the disk wants.
	replaceFile(t, filepath.Join(fs.Root(), "block/loop20000/queue/scheduler"), "[none] mq-deadline kyber\n")
	r.signals <- syscall.SIGUSR1
	waitFor(t, 5*time.Second, "the drift repaired back to the adaptive choice", func() bool {
		c := r.state(t).LastChange
		return c != nil && c.Drift && c.Attribute == "scheduler" && c.From == "none" && c.To == "mq-deadline" && c.Rule == "adaptive ("+reason+")"
	})
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	if d := applytest.Diff(r.writes.Of("loop20000", "scheduler"), []applytest.Write{
		applytest.W("loop20000", "scheduler", "mq-deadline"), applytest.W("loop20000", "scheduler", "mq-deadline"),
	}); d != "" {
		t.Errorf("the switch, then the drift repaired: %s", d)
	}

	// A reload that changes nothing of the rule keeps the controller.
	load.set(0)
	waitKernelScheduler(t, fs, "loop20000") // the reload's lookup reads what is offered
	writeFile(t, r.policy, pol+"\n# edited\n")
	r.replan(t, "the reload's re-plan", 5*time.Second)
	ds = r.state(t).Disks["loop20000"]
	if v, _ := schedulerSetting(ds); v != "mq-deadline" || ds.Adapt == nil || ds.Adapt.LastSwitch == nil || r.attr(t, "loop20000", "scheduler") != "mq-deadline" {
		t.Errorf("after a reload that kept the rule: scheduler %s, adaptive state %+v", r.attr(t, "loop20000", "scheduler"), ds.Adapt)
	}

	// One that changes the rule's options starts the window again, but
	// keeps the switch history and the choice: writing the probe's
	// winner back would be a switch no limit counts.
	writeFile(t, r.policy, adaptivePolicy("loop20000", seeds, "100ms", "600ms", "", daemonTable))
	r.replan(t, "the second reload's re-plan", 5*time.Second)
	waitFor(t, 5*time.Second, "the new options in the adaptive state", func() bool {
		ds = r.state(t).Disks["loop20000"]
		return ds != nil && ds.Adapt != nil && ds.Adapt.Window == "600ms"
	})
	if a := ds.Adapt; a.LastSwitch == nil || a.LastSwitch.To != "mq-deadline" || a.SwitchesToday != 1 || a.Scheduler != "mq-deadline" {
		t.Errorf("after a reload that changed the window: adaptive state %+v, last switch %+v", a, a.LastSwitch)
	}
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Errorf("after a reload that changed the window: scheduler %s, want the adaptive choice mq-deadline", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(switches) != 1 {
		t.Errorf("switches %v, want one", switches)
	}
}

// TestAdaptLimitsOutliveTheDaemon: max_switches_per_day counts over any
// 24 hours, not over one daemon's life nor one controller's. With a cap
// of 2, a daemon switches a fake disk to mq-deadline (depth 1); the next,
// on the same state directory, keeps that choice (no write at its start)
// and switches back to none (depth 32); the third, driven at depth 1
// again, is held by the cap, and so it stays after a reload that edits
// the margin. Before, each daemon (and the reload) started a fresh
// budget: the third switched, and each start wrote the probe's winner
// back first.
func TestAdaptLimitsOutliveTheDaemon(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	load := startFakeLoad(t, fs, "loop20000", 1000)
	seeds := seedCrossing(t, fs, "loop20000", crossingFigures())
	state := t.TempDir()
	pol := func(margin string) string {
		return adaptivePolicy("loop20000", seeds, "100ms", "500ms", "max_switches_per_day = 2\nmargin = \""+margin+"\"", "")
	}
	var mu sync.Mutex
	var switches []string
	run := func(policyText string) *running {
		t.Helper()
		r := start(t, policyText, func(c *Config) {
			c.FS = fs
			c.StateDir = state
			c.hooks.dial = newFakeDialer(ueventtest.NewConn()).dial
			c.hooks.stateDebounce = 10 * time.Millisecond
			c.hooks.adaptSampled = func(name string, p observe.Point, dec adapt.Decision, sched string) {
				if dec.Switch {
					mu.Lock()
					switches = append(switches, dec.From+"->"+dec.To)
					mu.Unlock()
				}
			}
		})
		waitFor(t, 5*time.Second, "the disk followed", func() bool {
			ds := r.state(t).Disks["loop20000"]
			return ds != nil && ds.Adapt != nil
		})
		return r
	}
	held := func(r *running) *statefile.AdaptState {
		t.Helper()
		var a *statefile.AdaptState
		waitFor(t, 10*time.Second, "a switch held by max_switches_per_day", func() bool {
			ds := r.state(t).Disks["loop20000"]
			a = ds.Adapt
			return a != nil && strings.HasPrefix(a.Held, "max_switches_per_day 2")
		})
		return a
	}

	load.set(1)
	r := run(pol("5%"))
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	waitKernelScheduler(t, fs, "loop20000")
	r.stop(t)

	load.set(32)
	r = run(pol("5%"))
	if a := r.state(t).Disks["loop20000"].Adapt; a.SwitchesToday != 1 || a.Scheduler != "mq-deadline" {
		t.Errorf("the second daemon's start: adaptive state %+v", a)
	}
	r.waitAttr(t, "loop20000", "scheduler", "none")
	waitKernelScheduler(t, fs, "loop20000")
	r.stop(t)

	load.set(1)
	r = run(pol("5%"))
	if a := held(r); a.SwitchesToday != 2 {
		t.Errorf("the third daemon: %d switches today, want 2", a.SwitchesToday)
	}
	writeFile(t, r.policy, pol("6%"))
	r.replan(t, "the reload's re-plan", 5*time.Second)
	if a := held(r); a.SwitchesToday != 2 {
		t.Errorf("after a margin edit: %d switches today, want 2", a.SwitchesToday)
	}
	if got := r.attr(t, "loop20000", "scheduler"); got != "none" {
		t.Errorf("scheduler %s, want none (the cap holds)", got)
	}
	r.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"none->mq-deadline", "mq-deadline->none"}; !slices.Equal(switches, want) {
		t.Errorf("switches %v, want %v", switches, want)
	}
}

// TestAdaptIdleDaemonHasNoSampler: with no adaptive rule no sampler runs,
// nor after a disk comes; a reload that adds one starts it, and a reload
// that takes it away ends it.
func TestAdaptIdleDaemonHasNoSampler(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	seeds := seedCrossing(t, fs, "loop20000", crossingFigures())
	// No scheduler set: the probe's winner is the disk's none, and
	// nothing rewrites its scheduler file.
	plain := `
[[rule]]
name = "loops"
[rule.match]
name = ["loop20000"]
[rule.set]
nr_requests = 64
`
	r, _ := fakeDaemonWith(t, plain, func(c *Config) { c.FS = fs }, "loop20000")
	sampling := func() bool {
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		return r.d.adapt.running
	}
	if sampling() {
		t.Fatal("a sampler runs with no adaptive rule")
	}
	writeFile(t, r.policy, adaptivePolicy("loop20000", seeds, "100ms", "500ms", "", ""))
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the sampler to start", sampling)
	writeFile(t, r.policy, plain)
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, "the sampler to end", func() bool { return !sampling() })
	// The state file is written after the pass the reload asks for, on
	// the state flush's own time: wait for it, then check it.
	waitFor(t, 5*time.Second, "the state without the adaptive record", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Adapt == nil
	})
}

// TestAdaptNotWhileAnotherHoldsTheDisk: while another process holds the
// disk's lock (an `iosched probe` measuring it), its samples are gaps and
// nothing switches, however long the load lasts; once the lock is let go
// a whole window of samples of the workload switches it.
func TestAdaptNotWhileAnotherHoldsTheDisk(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	load := startFakeLoad(t, fs, "loop20000", 1000)
	seeds := seedCrossing(t, fs, "loop20000", crossingFigures())
	var mu sync.Mutex
	var switched []time.Time
	r, _ := fakeDaemonWith(t, adaptivePolicy("loop20000", seeds, "100ms", "500ms", "", ""), func(c *Config) {
		c.FS = fs
		c.hooks.adaptSampled = func(name string, p observe.Point, dec adapt.Decision, sched string) {
			if dec.Switch {
				mu.Lock()
				switched = append(switched, p.At)
				mu.Unlock()
			}
		}
	}, "loop20000")
	release, err := r.otherProcessLocks(t).Lock("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	load.set(1)
	gaps := r.adaptGaps.Load()
	// Two windows of samples, all gaps.
	waitFor(t, 5*time.Second, "two windows of samples while the disk is held", func() bool { return r.adaptGaps.Load() >= gaps+10 })
	mu.Lock()
	n := len(switched)
	mu.Unlock()
	if n != 0 || r.attr(t, "loop20000", "scheduler") != "none" {
		t.Fatalf("switched while another process held the disk: %d switches, scheduler %s", n, r.attr(t, "loop20000", "scheduler"))
	}
	freed := time.Now()
	release()
	r.waitAttr(t, "loop20000", "scheduler", "mq-deadline")
	// The sampler reports its sample after it has asked for the switch's
	// pass, which may write first.
	waitFor(t, 5*time.Second, "the switching sample reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(switched) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(switched) != 1 || switched[0].Sub(freed) < 400*time.Millisecond { // a window, but for the sample spanning the release
		t.Errorf("switches at %v after the lock was let go at %v: want one, a window later", switched, freed)
	}
}

// BenchmarkAdaptSampleRound: one sampling round of 1000 adaptive disks
// (fake ones: their stat files are regular files), each a read of its stat
// file, the controller's Observe and State. At the default sample of 5 s,
// a round's time over 5 s is the share of one CPU the sampling takes.
func BenchmarkAdaptSampleRound(b *testing.B) {
	d, names := idleDaemon(b, 1000)
	curves, order := crossingCurves()
	opt := adaptopt.Default()
	for _, name := range names {
		ctl, err := adapt.NewController(opt, curves, order, "none")
		if err != nil {
			b.Fatal(err)
		}
		n, err := sysfs.ParseName(name)
		if err != nil {
			b.Fatal(err)
		}
		d.record(n).adapt = &adaptDisk{rule: "adaptive", opt: opt, curves: curves, order: order, ctl: ctl, current: "none"}
	}
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(opt.Sample)
		d.sampleDue(now)
	}
	b.StopTimer()
	for _, rec := range d.records() {
		rec.mu.Lock()
		rec.adapt.close()
		rec.mu.Unlock()
	}
}

// crossingCurves are crossingFigures as a controller takes them.
func crossingCurves() (map[string][]probe.CurvePoint, []string) {
	curves := map[string][]probe.CurvePoint{}
	var order []string
	for _, c := range crossingFigures() {
		curves[c.Scheduler] = c.Curve
		order = append(order, c.Scheduler)
	}
	return curves, order
}
