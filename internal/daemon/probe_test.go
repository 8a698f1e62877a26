package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
)

// fakeProbePolicy: loop20000 gets kyber as its interim scheduler and is
// probed between none and mq-deadline; extra follows.
func fakeProbePolicy(extra string) string {
	return `
[[rule]]
name = "probed"
[rule.match]
name = ["loop20000"]
[rule.set]
scheduler = "kyber"
nr_requests = 64
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
duration = "100ms"
rounds = 1
` + extra
}

func fig(name string, iops float64) probe.Candidate {
	f := probe.Figures{IOPS: iops, QD1P99: 50}
	return probe.Candidate{Scheduler: name, Figures: f, Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f}}}
}

// TestProbeSeededWithoutProbing: a seeded result for the disk's key is
// applied at the first pass, straight to the winner (no interim switch), with
// the provenance as the rule in the log and the state; nothing is probed.
func TestProbeSeededWithoutProbing(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	dev, err := fs.Device("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	seedDir := t.TempDir()
	o := probe.DefaultOptions()
	figs := []probe.Candidate{fig("none", 100e3), fig("mq-deadline", 200e3)}
	fleet := probe.OpenStore(filepath.Join(seedDir, "fleet"), nil)
	if err := fleet.Remember(probe.Record{
		Key: probe.KeyOf(fs, dev), Device: "loop20000", At: time.Now().Add(-time.Hour),
		Method: probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
		Rounds: 1, Figures: figs,
	}); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(seedDir, "probes.d", "fleet.json")
	if _, err := fleet.Export(seed); err != nil {
		t.Fatal(err)
	}
	prom := filepath.Join(t.TempDir(), "iosched.prom")
	pol := fakeProbePolicy(fmt.Sprintf("[daemon]\nprobe_results = [%q]\nmetrics_file = %q\n", filepath.Join(seedDir, "probes.d", "*.json"), prom))
	r, _ := fakeDaemonWith(t, pol, func(c *Config) { c.FS = fs }, "loop20000")
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Fatalf("scheduler after the start = %s, want the seeded mq-deadline", got)
	}
	// Straight to the winner: no interim kyber first.
	if d := applytest.Diff(r.writes.Of("loop20000", "scheduler"), []applytest.Write{applytest.W("loop20000", "scheduler", "mq-deadline")}); d != "" {
		t.Errorf("the seeded result's scheduler: %s", d)
	}
	waitFor(t, 5*time.Second, "the seeded decision in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		if ds == nil || ds.Probe == nil || len(ds.Settings) == 0 {
			return false
		}
		return ds.Probe.Status == "decided" && ds.Probe.Winner == "mq-deadline" && strings.HasPrefix(ds.Probe.From, "seeded from "+seed) &&
			ds.Settings[0].Rule == `probed (probe: mq-deadline 200K IOPS vs none 100K (+100%), depth-1 p99 +0%)`
	})
	// The metrics carry the decision's figures, one series per candidate.
	waitFor(t, 5*time.Second, "the probe's figures in the metrics file", func() bool {
		fams := metricsFile(t, prom)
		return sample(fams, "iosched_probe_iops", map[string]string{"disk": "loop20000", "scheduler": "mq-deadline", "depth": "deep"}) == 200e3 &&
			sample(fams, "iosched_probe_chosen", map[string]string{"disk": "loop20000", "scheduler": "mq-deadline"}) == 1 &&
			sample(fams, "iosched_probe_chosen", map[string]string{"disk": "loop20000", "scheduler": "none"}) == 0
	})
}

// TestProbeSeedErrorsInState: a seeded result that names a scheduler no
// kernel has is not used, and said so once (the log, the state file's
// policy), not with each disk's lookup; the valid seed still decides.
// Before, the daemon dropped it without a word.
func TestProbeSeedErrorsInState(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000", "loop20001")
	dev, err := fs.Device("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	o := probe.DefaultOptions()
	method := probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}}
	good := probe.Record{Key: probe.KeyOf(fs, dev), Device: "loop20000", At: time.Now().Add(-time.Hour), Method: method, Rounds: 1,
		Figures: []probe.Candidate{fig("none", 100e3), fig("mq-deadline", 200e3)}}
	frob := good
	frob.Device, frob.Method.Candidates = "vdf", []string{"none", "frobnicate"}
	frob.Figures = []probe.Candidate{fig("none", 100e3), fig("frobnicate", 900e3)}
	seed := filepath.Join(t.TempDir(), "fleet.json")
	b, err := json.Marshal(map[string]any{"version": 1, "results": []probe.Record{frob, good}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pol := strings.Replace(fakeProbePolicy(fmt.Sprintf("[daemon]\nprobe_results = [%q]\n", seed)), `name = ["loop20000"]`, `name = ["loop20000", "loop20001"]`, 1)
	r, _ := fakeDaemonWith(t, pol, func(c *Config) { c.FS = fs }, "loop20000", "loop20001")
	if got := r.attr(t, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Errorf("scheduler after the start = %s, want the valid seed's mq-deadline", got)
	}
	want := seed + `: result 1 (device vdf): not used: candidate "frobnicate" is not a scheduler`
	// Said once, not with each disk's lookup: the log's volume is the
	// behaviour here (the state's seed errors are checked below).
	if n := len(r.log.Lines("seeded probe results: not used", seed+": result 1 (device vdf): not used: candidate")); n != 1 {
		t.Errorf("the refused seed logged %d times, want once", n)
	}
	if n := len(r.log.Lines("looking up remembered probe results")); n != 0 {
		t.Errorf("a disk's lookup warned %d times of the policy's seed error", n)
	}
	st := r.state(t)
	if len(st.Policy.SeedErrors) != 1 || !strings.Contains(st.Policy.SeedErrors[0], want) {
		t.Errorf("state's seed errors %q, want one naming %s", st.Policy.SeedErrors, want)
	}
}

// TestProbePendingInterim: without a result the rule's other settings are
// made at once, its scheduler as the interim value, and the probe is
// queued; here it is refused (the fake tree cannot be probed), so
// the interim settings stay and the state says why.
//
// The pass that queues the probe is held, before its writes, until the
// probe's goroutine has gone as far as it can on its own: waiting for that
// pass to end, or (were it to start at once) measuring the disk, which
// would make the pass skip its writes.
func TestProbePendingInterim(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{})
	var once sync.Once
	r, _ := fakeDaemonWith(t, fakeProbePolicy(""), func(c *Config) {
		c.hooks.probeStep = func(name, step string) {
			switch step {
			case "queued":
				<-ran
			default:
				once.Do(func() { close(ran) })
			}
		}
	}, "loop20000")
	// The start's scan made them, not a pass after the probe.
	r.d.mu.Lock()
	scan := *r.d.report.Scan
	r.d.mu.Unlock()
	if scan.Reason != "start" || scan.Writes != 2 {
		t.Fatalf("the %s scan wrote %d settings, want the start's to write the interim scheduler and nr_requests", scan.Reason, scan.Writes)
	}
	if got, nr := r.attr(t, "loop20000", "scheduler"), r.attr(t, "loop20000", "nr_requests"); got != "kyber" || nr != "64" {
		t.Fatalf("after the start: scheduler %s nr_requests %s, want the interim kyber and 64", got, nr)
	}
	waitFor(t, 5*time.Second, "the refused probe in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "refused" && ds.Probe.Interim == "kyber" && strings.Contains(ds.Probe.Error, "probe refused")
	})
	if d := applytest.Diff(r.writes.Of("loop20000", ""), []applytest.Write{
		applytest.W("loop20000", "scheduler", "kyber"), applytest.W("loop20000", "nr_requests", "64"),
	}); d != "" {
		t.Errorf("the interim settings, written once: %s", d)
	}
	if got := r.attr(t, "loop20000", "scheduler"); got != "kyber" {
		t.Errorf("after the refused probe: scheduler %s, want kyber kept", got)
	}
}

// TestProbeBudget: a probe that needs more than what is left of
// probe_budget is not started; the interim settings stay and the state
// says so.
func TestProbeBudget(t *testing.T) {
	t.Parallel()
	// The probe's budget: 0.2 s busy check + 2 x (0.15 s switch + 25 ms
	// warm-up + 2 x 0.1 s) + 0.3 s restore = 1.25 s.
	r, _ := fakeDaemon(t, fakeProbePolicy("[daemon]\nprobe_budget = \"1s\"\n"), "loop20000")
	waitFor(t, 5*time.Second, "the probe to be over budget in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "budget"
	})
	if ds := r.state(t).Disks["loop20000"]; ds.Probe.Winner != "" || ds.Probe.From != "" {
		t.Errorf("probe state %+v: want the budget spent, nothing measured", ds.Probe)
	}
	if d := applytest.Diff(r.writes.Of("loop20000", ""), []applytest.Write{
		applytest.W("loop20000", "scheduler", "kyber"), applytest.W("loop20000", "nr_requests", "64"),
	}); d != "" {
		t.Errorf("the interim settings, written once: %s", d)
	}
	if got := r.attr(t, "loop20000", "scheduler"); got != "kyber" {
		t.Errorf("scheduler %s, want the interim kyber", got)
	}
}

// TestProbesOneMeasuringPerDisk: a probe of a disk waits until the one
// before it (cancelled by a reload, still restoring) has ended; passes are
// held off the disk all along; a cancelled wait gives up.
func TestProbesOneMeasuringPerDisk(t *testing.T) {
	t.Parallel()
	rec, other := &disk{}, &disk{}
	if !rec.startMeasuring(context.Background()) || !rec.probing() || other.probing() {
		t.Fatal("the first probe does not hold its disk alone")
	}
	// A second probe that can only wait (its context is done) gives up:
	// it would start were the disk not held.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if rec.startMeasuring(done) {
		t.Fatal("a second probe of the disk started while the first measured")
	}
	second := make(chan bool)
	go func() { second <- rec.startMeasuring(context.Background()) }()
	rec.cancelProbe() // a reload: the disk stays held while its probe restores
	if !rec.probing() {
		t.Error("a cancelled probe let passes onto a disk it still restores")
	}
	rec.endMeasuring()
	if !<-second || !rec.probing() {
		t.Fatal("the second probe did not start once the first ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rec.startMeasuring(ctx) {
		t.Error("a cancelled probe started")
	}
	rec.endMeasuring()
	if rec.probing() {
		t.Error("the disk is still held after its probes ended")
	}
}

// TestProbesCancel: forgetting a disk (removed, or another under its name)
// cancels its probe and drops its decision.
func TestProbesCancel(t *testing.T) {
	t.Parallel()
	rec := &disk{}
	ctx, cancel := context.WithCancel(context.Background())
	rec.probe = &diskProbe{cancel: cancel}
	rec.probeFailed = &probeFailure{}
	rec.cancelProbe()
	if ctx.Err() == nil || rec.probeState() != nil || rec.probeFailed != nil {
		t.Error("the probe of a forgotten disk goes on")
	}
}

// probedPolicy is fakeProbePolicy with read_ahead_kb and the probe's
// duration as given.
func probedPolicy(readAheadKB int, duration string) string {
	return fmt.Sprintf(`
[[rule]]
name = "probed"
[rule.match]
name = ["loop20000"]
[rule.set]
scheduler = "kyber"
nr_requests = 64
read_ahead_kb = %d
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
duration = %q
rounds = 1
`, readAheadKB, duration)
}

// reload writes policyText, sends SIGHUP, and waits until the reload has
// re-planned every disk (the seq-th since the start).
func (r *running) reload(t *testing.T, policyText string, seq int) {
	t.Helper()
	writeFile(t, r.policy, policyText)
	r.signals <- syscall.SIGHUP
	waitFor(t, 5*time.Second, fmt.Sprintf("reload %d to re-plan every disk", seq), func() bool {
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		last := r.d.report.LastReload()
		return last != nil && last.Seq == seq && last.OK && last.Done
	})
}

// TestReloadKeepsAnUnchangedProbe: reloads that change none of a disk's
// probe settings leave its running probe alone; one that changes them
// cancels it and probes the disk again under the new ones.
func TestReloadKeepsAnUnchangedProbe(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	measured := 0
	r, _ := fakeDaemonWith(t, probedPolicy(128, "100ms"), func(c *Config) {
		c.hooks.probeStep = func(name, step string) {
			if step != "measuring" {
				return
			}
			mu.Lock()
			measured++
			first := measured == 1
			mu.Unlock()
			if first {
				<-release // the first probe holds the disk until the reloads are done
			}
		}
	}, "loop20000")
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the daemon's stop, on a failure
	waitFor(t, 5*time.Second, "the probe to hold the disk", func() bool { return r.d.probeHolds("loop20000") })
	for i := 1; i <= 10; i++ {
		r.reload(t, probedPolicy(128+4*i, "100ms"), i)
	}
	rec := r.d.recordOf("loop20000")
	rec.mu.Lock()
	var run *probeRun
	if dp := rec.probe; dp != nil {
		run = dp.run
	}
	rec.mu.Unlock()
	if run == nil || run.ctx.Err() != nil {
		t.Fatal("reloads that changed only read_ahead_kb cancelled the running probe")
	}
	r.reload(t, probedPolicy(128, "200ms"), 11)
	if run.ctx.Err() == nil {
		t.Fatal("a reload that changed the probe's duration left the running probe")
	}
	letGo()
	waitFor(t, 5*time.Second, "the new probe's outcome in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "refused"
	})
	mu.Lock()
	defer mu.Unlock()
	if measured != 2 {
		t.Errorf("the disk was probed %d times, want 2: the first, cancelled by the reload that changed the duration, and the one after", measured)
	}
}

// TestProbeDisturbedNotReused: a result measured with --force while others
// used the disk is remembered marked as disturbed; the daemon does not
// apply it, but queues a probe of its own (which waits for the disk to be
// idle), the interim settings meanwhile. (Before, it was reused as any
// other result.)
func TestProbeDisturbedNotReused(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	dev, err := fs.Device("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	o := probe.DefaultOptions()
	figs := []probe.Candidate{fig("none", 100e3), fig("mq-deadline", 200e3)}
	if err := probe.OpenStore(state, nil).Remember(probe.Record{
		Key: probe.KeyOf(fs, dev), Device: "loop20000", At: time.Now().Add(-time.Hour),
		Method: probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
		Rounds: 1, Figures: figs, Decision: probe.Decide(o.Choose, o.Margin, "none", figs),
		Disturbed: "the disk is busy: 4000 I/Os by others in 200ms",
	}); err != nil {
		t.Fatal(err)
	}
	r, _ := fakeDaemonWith(t, fakeProbePolicy(""), func(c *Config) { c.FS = fs; c.StateDir = state }, "loop20000")
	if got := r.attr(t, "loop20000", "scheduler"); got != "kyber" {
		t.Errorf("scheduler after the start = %s, want the interim kyber (the disturbed result not used)", got)
	}
	// Queued, and refused (a fake tree cannot be probed): never decided
	// from the disturbed result.
	waitFor(t, 5*time.Second, "the probe queued for the disk to show in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "refused"
	})
	if ps := r.state(t).Disks["loop20000"].Probe; ps.Winner != "" || ps.From != "" {
		t.Errorf("the disturbed result was reused: %+v", ps)
	}
	if d := applytest.Diff(r.writes.Of("loop20000", "scheduler"), []applytest.Write{applytest.W("loop20000", "scheduler", "kyber")}); d != "" {
		t.Errorf("the interim scheduler only: %s", d)
	}
}

// TestProbeFailedNotRetriedOnReload: a probe that failed (here refused: a
// fake tree cannot be probed) is not run again by a reload's re-plan
// before its backoff, while its rule's probe settings and the disk stay
// the same: a reload that changes another setting leaves the failure in
// the state with when it is tried again. One that changes the probe's
// settings probes at once; after the backoff a reload probes again, and
// a second failure in a row backs off twice as long. (Before, every
// reload ran the failed probe again: its whole budget of load on the
// disk each time.)
func TestProbeFailedNotRetriedOnReload(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	measured := 0
	r, _ := fakeDaemonWith(t, probedPolicy(128, "100ms"), func(c *Config) {
		c.hooks.probeStep = func(name, step string) {
			if step == "measuring" {
				mu.Lock()
				measured++
				mu.Unlock()
			}
		}
	}, "loop20000")
	probeState := func() *statefile.ProbeState {
		ds := r.state(t).Disks["loop20000"]
		if ds == nil {
			return nil
		}
		return ds.Probe
	}
	refused := func(what string, backingOff bool) {
		t.Helper()
		waitFor(t, 5*time.Second, what, func() bool {
			ps := probeState()
			return ps != nil && ps.Status == "refused" && strings.Contains(ps.Error, "not probed again before") == backingOff
		})
	}
	measures := func() int {
		mu.Lock()
		defer mu.Unlock()
		return measured
	}
	refused("the first probe refused", false)
	seq := 0
	for i := 1; i <= 3; i++ {
		seq++
		r.reload(t, probedPolicy(128+4*i, "100ms"), seq)
		refused(fmt.Sprintf("reload %d: the failure kept, backing off", i), true)
	}
	if n := measures(); n != 1 {
		t.Errorf("probed %d times over three reloads that kept its settings, want 1", n)
	}

	// New probe settings: probed at once.
	seq++
	r.reload(t, probedPolicy(140, "200ms"), seq)
	refused("the probe with new settings refused", false)
	if n := measures(); n != 2 {
		t.Errorf("probed %d times after the probe's settings changed, want 2", n)
	}

}

// TestProbeBackoffGrows: past its backoff, a reload probes a disk whose
// probe failed again; the second failure in a row backs off twice as
// long.
func TestProbeBackoffGrows(t *testing.T) {
	var mu sync.Mutex
	measured := 0
	r, _ := fakeDaemonWith(t, probedPolicy(128, "200ms"), func(c *Config) {
		c.hooks.probeStep = func(name, step string) {
			if step == "measuring" {
				mu.Lock()
				measured++
				mu.Unlock()
			}
		}
	}, "loop20000")
	measures := func() int {
		mu.Lock()
		defer mu.Unlock()
		return measured
	}
	rec := r.d.recordOf("loop20000")
	waitFor(t, 5*time.Second, "the first failure noted", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.probeFailed != nil
	})
	rec.mu.Lock()
	f := rec.probeFailed
	if f == nil || f.failures != 1 {
		rec.mu.Unlock()
		t.Fatalf("failure %+v, want the first of the new settings", f)
	}
	f.until = time.Now().Add(-time.Second)
	rec.mu.Unlock()
	before := time.Now()
	r.reload(t, probedPolicy(144, "200ms"), 1)
	waitFor(t, 5*time.Second, "the probe past its backoff", func() bool { return measures() == 2 })
	waitFor(t, 5*time.Second, "its second failure noted", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		f := rec.probeFailed
		return f != nil && f.failures == 2
	})
	rec.mu.Lock()
	until := rec.probeFailed.until
	rec.mu.Unlock()
	if wait := until.Sub(before); wait < 2*probeBackoff || wait > 2*probeBackoff+time.Minute {
		t.Errorf("after two failures in a row: not before %s, want %s from now", wait.Round(time.Second), 2*probeBackoff)
	}
}

func TestProbeBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, 80 * time.Minute, 160 * time.Minute, 320 * time.Minute, 6 * time.Hour, 6 * time.Hour}
	for i, w := range want {
		if got := backoffAfter(i + 1); got != w {
			t.Errorf("backoff after %d failures: %s, want %s", i+1, got, w)
		}
	}
	if got := backoffAfter(1000); got != probeBackoffMax {
		t.Errorf("backoff after 1000 failures: %s", got)
	}
}

// TestProbeUndecidedIsNoDecision: a probe whose figures decide nothing (a
// rate that moved while it ran) names as its Winner only the scheduler it
// left in place, which need not be the disk's own: the daemon applies
// none of it, keeps the interim settings and notes a failure, retried
// after the backoff. (Before, it applied the Winner as a decision.)
func TestProbeUndecidedIsNoDecision(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, "loop20000")
	r, _ := fakeDaemonWith(t, fakeProbePolicy(""), func(c *Config) { c.FS = fs }, "loop20000")
	waitFor(t, 5*time.Second, "the fake disk's probe to end (refused)", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "refused"
	})
	rec := r.d.recordOf("loop20000")
	rec.mu.Lock()
	dp := rec.probe
	rec.mu.Unlock()
	dev, err := fs.Device("loop20000")
	if err != nil {
		t.Fatal(err)
	}
	pr, rule := r.d.policy.Load().ProbeFor(dev)
	if dp == nil || pr == nil {
		t.Fatal("no probe state for the disk, or no [rule.probe] for it")
	}
	run := &probeRun{d: r.d, ctx: context.Background(), dp: dp, rec: rec, name: "loop20000", rule: rule, probe: pr, facts: dev}
	rep := &probe.Report{Decision: probe.Decision{Winner: "mq-deadline", Reason: "no decision: the rate fell 3x in round 2; the current scheduler stays",
		Provenance: "probe: disturbed, mq-deadline kept", Undecided: true}}
	passes := r.passes.Load()
	run.record(rep, time.Second, nil)
	waitFor(t, 5*time.Second, "the undecided probe in the state file", func() bool {
		ds := r.state(t).Disks["loop20000"]
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "failed" && strings.Contains(ds.Probe.Error, "no decision")
	})
	r.waitPasses(t, passes+1) // the pass the outcome asks for
	if got := r.attr(t, "loop20000", "scheduler"); got != "kyber" {
		t.Errorf("scheduler after an undecided probe = %s, want the interim kyber", got)
	}
}
