package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/applytest"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// Loops 23500-23509: adaptive disks (23500 slow, 23501 over /dev/shm).

// The phased test's timing: windows of seconds.
const (
	phasedSample = 200 * time.Millisecond
	phasedWindow = 2 * time.Second
	// phasedSlack is what a switch may take past one window and one
	// sample after its phase began: the timer's wakeup and the reads in
	// flight of the phase before draining (32 reads of 1 ms).
	phasedSlack = 300 * time.Millisecond
	// phasedPerRead is the slow disk's time per read: about 1000 IOPS
	// whatever the depth, each read waiting its turn in flight.
	phasedPerRead = time.Millisecond
)

// sampled is one sample of an adaptive disk, as the daemon's hook saw it.
type sampled struct {
	at        time.Time
	phase     string
	driven    int
	point     observe.Point
	dec       adapt.Decision
	scheduler string // the sample's; To after a switch
}

// sampleLog keeps the samples of one disk, each marked with the phase
// the test was in.
type sampleLog struct {
	name string
	mu   sync.Mutex
	all  []sampled
	// phase and driven are the test's current phase and driven depth.
	phase  string
	driven int
}

func (l *sampleLog) hook(name string, p observe.Point, dec adapt.Decision, sched string) {
	if name != l.name {
		return
	}
	if dec.Switch {
		sched = dec.To
	}
	l.mu.Lock()
	l.all = append(l.all, sampled{at: p.At, phase: l.phase, driven: l.driven, point: p, dec: dec, scheduler: sched})
	l.mu.Unlock()
}

func (l *sampleLog) enter(phase string, driven int) {
	l.mu.Lock()
	l.phase, l.driven = phase, driven
	l.mu.Unlock()
}

// of returns the samples of phase.
func (l *sampleLog) of(phase string) []sampled {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sampled
	for _, s := range l.all {
		if s.phase == phase {
			out = append(out, s)
		}
	}
	return out
}

func switchesOf(ss []sampled) []sampled {
	var out []sampled
	for _, s := range ss {
		if s.dec.Switch {
			out = append(out, s)
		}
	}
	return out
}

// writeCSV writes the samples as time (s since the first), driven depth,
// observed busy depth, scheduler: what contrib/bench's adaptive chart
// draws.
func (l *sampleLog) writeCSV(t *testing.T, path string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	b.WriteString("t_s,phase,driven_depth,busy_depth,busy,scheduler,switch\n")
	for _, s := range l.all {
		sw := ""
		if s.dec.Switch {
			sw = s.dec.From + "->" + s.dec.To
		}
		fmt.Fprintf(&b, "%.3f,%s,%d,%.3f,%.3f,%s,%s\n", s.at.Sub(l.all[0].at).Seconds(), s.phase, s.driven, s.point.BusyDepth, s.point.Busy, s.scheduler, sw)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// reader drives a disk with the probe's own engine: depth reads in flight,
// read-only, until stopped.
type reader struct {
	cancel context.CancelFunc
	done   chan error
}

func startReader(t *testing.T, name string, depth int) *reader {
	t.Helper()
	node := "/dev/" + name
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("size of %s: %v", node, err)
	}
	eng, err := probe.NewEngine(probe.EnginePsync)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &reader{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer unix.Close(fd)
		_, err := eng.Run(ctx, &probe.Job{FD: fd, BlockSize: 4096, Depth: depth, Deadline: time.Now().Add(time.Hour), Size: int64(size), Seed: uint64(depth)})
		r.done <- err
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *reader) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil && err != context.Canceled {
		t.Errorf("reader: %v", err)
	}
}

// TestIntegrationAdaptPhased: a slow loop device (each read takes a fixed
// time in the device, so the disk counts the reads the test keeps in
// flight) with a seeded probe result whose curves cross: mq-deadline ahead
// by 15% at depths 1 and 2, none by 50% from depth 8. The disk starts on
// the probe's winner (none). An idle phase switches nothing; a depth-1
// phase ends on mq-deadline, a depth-32 phase on none, each by one switch
// within one window and one sample of the phase's start; a load hovering
// at the crossing (depths 2 to 4) switches nothing; a last idle phase
// nothing either. The switches are ordinary passes with the switch's
// reason as their rule, in the log and the state.
//
// With IOSCHED_PHASED_CSV=path it writes each sample there (time, phase,
// driven depth, observed busy depth, scheduler): contrib/bench's
// `adaptive` command draws it.
func TestIntegrationAdaptPhased(t *testing.T) {
	requireLoops(t)
	l := looptest.AddSlow(t, 23500, 64<<20, phasedPerRead)
	name := l.Name
	setScheduler(t, name, "none")
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	seeds := seedCrossing(t, fs, name, crossingFigures())
	log := &sampleLog{name: name}
	log.enter("start", 0)
	r := start(t, adaptivePolicy(name, seeds, phasedSample.String(), phasedWindow.String(), "", ""), withStateDir(t.TempDir()),
		func(c *Config) { c.hooks.adaptSampled = log.hook })
	if csv := os.Getenv("IOSCHED_PHASED_CSV"); csv != "" {
		t.Cleanup(func() { log.writeCSV(t, csv) })
	}
	waitFor(t, 10*time.Second, "the seeded decision on the disk, followed", func() bool {
		return activeScheduler(t, name) == "none" && len(log.of("start")) > 0
	})

	// samplesPast waits for n samples of phase taken after since.
	samplesPast := func(phase string, since time.Time, n int) {
		t.Helper()
		waitFor(t, phasedWindow+time.Duration(n+5)*phasedSample, fmt.Sprintf("%d samples of the %s phase", n, phase), func() bool {
			c := 0
			for _, s := range log.of(phase) {
				if s.at.After(since) {
					c++
				}
			}
			return c >= n
		})
	}
	windowSamples := int(phasedWindow / phasedSample)

	// idle runs a phase without load for a window and two samples; no
	// sample may switch.
	idle := func(phase string) {
		t.Helper()
		log.enter(phase, 0)
		samplesPast(phase, time.Now(), windowSamples+2)
		if sw := switchesOf(log.of(phase)); len(sw) > 0 {
			t.Errorf("%s: %d switches while idle, first %s -> %s (%s)", phase, len(sw), sw[0].dec.From, sw[0].dec.To, sw[0].dec.Reason)
		}
	}

	// driven runs a phase at depth until the disk is switched to want,
	// then a window and two samples more: one switch, within a window
	// and a sample (and the slack) of the phase's start.
	driven := func(phase string, depth int, want string) {
		t.Helper()
		log.enter(phase, depth)
		begin := time.Now()
		rd := startReader(t, name, depth)
		waitFor(t, phasedWindow+phasedSample+5*time.Second, phase+": the switch to "+want, func() bool {
			return len(switchesOf(log.of(phase))) > 0
		})
		first := switchesOf(log.of(phase))[0]
		if took := first.at.Sub(begin); took > phasedWindow+phasedSample+phasedSlack {
			t.Errorf("%s: switched %s after the phase began, want within %s + %s (+%s slack)", phase, took.Round(time.Millisecond), phasedWindow, phasedSample, phasedSlack)
		}
		if first.dec.To != want {
			t.Errorf("%s: switched %s -> %s (%s), want %s", phase, first.dec.From, first.dec.To, first.dec.Reason, want)
		}
		waitFor(t, 5*time.Second, phase+": "+want+" on the disk", func() bool { return activeScheduler(t, name) == want })
		samplesPast(phase, first.at, windowSamples+2)
		ss := log.of(phase) // all taken under the full load
		rd.stop(t)
		if sw := switchesOf(ss); len(sw) != 1 {
			t.Errorf("%s: %d switches, want 1", phase, len(sw))
		}
		last := ss[len(ss)-1].point.BusyDepth
		if last < float64(depth)*0.8 || last > float64(depth)*1.2+0.5 {
			t.Errorf("%s: the disk's busy depth %.1f, driven at %d", phase, last, depth)
		}
		if !slices.Contains(r.writes.Of(name, "scheduler"), applytest.W(name, "scheduler", want)) {
			t.Errorf("%s: no pass wrote %s", phase, want)
		}
	}

	idle("idle")
	driven("depth 1", 1, "mq-deadline")
	// The reason carries the busy depth measured, which load around the
	// test moves (1, 1.1): the state must name the adaptive switch and
	// its curve, not a figure.
	ds := r.diskState(t, name)
	if v, rule := schedulerSetting(ds); v != "mq-deadline" || !strings.HasPrefix(rule, "adaptive (adapt: busy depth ") ||
		!strings.Contains(rule, " over 2s; curve: mq-deadline ") || !strings.Contains(rule, "x none at depth ") {
		t.Errorf("state after the depth-1 phase: scheduler %s, rule %q", v, rule)
	}
	driven("depth 32", 32, "none")

	// At the crossing: depths 2, 3, 4, 3, ... each for less than a
	// window; neither candidate is ahead by the margin over a window.
	log.enter("hover", 3)
	begin := time.Now()
	for i := 0; time.Since(begin) < 3*phasedWindow; i++ {
		depth := []int{2, 3, 4, 3}[i%4]
		log.enter("hover", depth)
		rd := startReader(t, name, depth)
		time.Sleep(phasedWindow / 4) // the load's shape, not a wait for an outcome
		rd.stop(t)
	}
	if n := len(log.of("hover")); n < 3*windowSamples-3 {
		t.Errorf("hover: %d samples over three windows of %d", n, windowSamples)
	}
	if sw := switchesOf(log.of("hover")); len(sw) > 0 {
		t.Errorf("hover: %d switches at the crossing, first %s -> %s (%s)", len(sw), sw[0].dec.From, sw[0].dec.To, sw[0].dec.Reason)
	}
	idle("idle after")
	if s := activeScheduler(t, name); s != "none" {
		t.Errorf("scheduler at the end %s, want none", s)
	}
	st := r.diskState(t, name)
	if st == nil || st.Adapt == nil || st.Adapt.SwitchesToday != 2 || st.Adapt.LastSwitch == nil || st.Adapt.LastSwitch.To != "none" {
		t.Errorf("adaptive state at the end: %+v", st)
	}
}

// TestIntegrationAdaptMeasuredCurve: with the slow loop's own measured
// curve (no seed: the loop favours neither at any depth, its reads taking
// their time in the device whatever the scheduler), the disk is never
// switched away from the probe's winner, none, at depth 1 or 32. The two
// candidates measure within noise of each other (up to 9% apart at 1 s a
// point, one round), so both margins are 20%: the probe keeps the disk's
// none, and the controller must not take noise for a crossing.
//
// Not a loop over /dev/shm: there the reader, not the disk, is the
// bottleneck, and each scheduler leaves a different number of requests in
// flight at the disk for the same reads (at 32 reads in flight, 17.7 with
// none and 6.8 with mq-deadline in one probe), so curves read at the
// disk's own depth compare unlike loads.
func TestIntegrationAdaptMeasuredCurve(t *testing.T) {
	requireLoops(t)
	l := looptest.AddSlow(t, 23501, 64<<20, phasedPerRead)
	name := l.Name
	setScheduler(t, name, "none")
	log := &sampleLog{name: name}
	log.enter("start", 0)
	pol := fmt.Sprintf(`
[[rule]]
name = "adaptive"
[rule.match]
name = [%q]
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
duration = "1s"
rounds = 1
depth = 32
depths = [1, 32]
margin = "20%%"
[rule.adapt]
sample = %q
window = %q
margin = "20%%"
min_interval = "0s"
guard = false
`, name, phasedSample.String(), phasedWindow.String())
	r := start(t, pol, withStateDir(t.TempDir()), func(c *Config) { c.hooks.adaptSampled = log.hook })
	// The probe's budget has little room for a disk whose reads take a
	// millisecond (about 5.0 s of its 5.3 s here, more on a loaded
	// machine): one that ran out of it is tried again by a reload, as an
	// administrator would, at most twice.
	var failedSince time.Time // the last failed probe's, which a retry must not count again
	for try := 1; ; try++ {
		var ds *statefile.DiskState
		waitFor(t, 30*time.Second, "the probe's outcome", func() bool {
			ds = r.diskState(t, name)
			return ds != nil && ds.Probe != nil && (ds.Probe.Status == "decided" && ds.Adapt != nil ||
				ds.Probe.Status == "failed" && ds.Probe.Since.After(failedSince))
		})
		if ds.Probe.Status == "decided" {
			break
		}
		if try == 3 || !strings.Contains(ds.Probe.Error, "budget") {
			t.Fatalf("probe %d failed: %s", try, ds.Probe.Error)
		}
		t.Logf("probe %d: %s; again, by a reload", try, ds.Probe.Error)
		failedSince = ds.Probe.Since
		r.replan(t, "the reload's re-plan", 10*time.Second)
	}
	t.Logf("probe decided: %+v", r.diskState(t, name).Probe)
	if w := r.diskState(t, name).Probe.Winner; w != "none" {
		t.Fatalf("the probe chose %s, want none (the disk's, kept unless another is ahead by the margin)", w)
	}
	for _, depth := range []int{1, 32} {
		phase := fmt.Sprintf("depth %d", depth)
		log.enter(phase, depth)
		since := time.Now()
		rd := startReader(t, name, depth)
		waitFor(t, phasedWindow+5*time.Second, phase+": a window of samples", func() bool {
			c := 0
			for _, s := range log.of(phase) {
				if s.at.After(since) {
					c++
				}
			}
			return c >= int(phasedWindow/phasedSample)+2
		})
		rd.stop(t)
	}
	log.mu.Lock()
	all := append([]sampled(nil), log.all...)
	log.mu.Unlock()
	for _, s := range all {
		if s.dec.Switch {
			t.Errorf("%s: switched %s -> %s (%s) at busy depth %.1f", s.phase, s.dec.From, s.dec.To, s.dec.Reason, s.point.BusyDepth)
		}
	}
	if s := activeScheduler(t, name); s != "none" {
		t.Errorf("scheduler %s, want none", s)
	}
}

// buildIosched builds the iosched command for a test that runs it as a
// user would.
func buildIosched(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iosched")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/iosched").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// schedulerWrites counts the changes of a disk's active scheduler, read
// from sysfs every 2 ms: a switch lasts at least a sample (and a window)
// before the next, so none is missed.
type schedulerWrites struct {
	n    atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func countSchedulerWrites(t *testing.T, name string) *schedulerWrites {
	t.Helper()
	w := &schedulerWrites{stop: make(chan struct{}), done: make(chan struct{})}
	last := activeScheduler(t, name)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			b, err := os.ReadFile("/sys/block/" + name + "/queue/scheduler")
			if err != nil {
				continue
			}
			s := string(b)
			if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
				if cur := s[i+1 : j]; cur != last {
					last = cur
					w.n.Add(1)
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
	})
	return w
}

// TestIntegrationAdaptBudgetSurvivesKill: the iosched command as a daemon
// on a slow loop whose seeded curves cross, with max_switches_per_day = 2,
// killed with SIGKILL and started again five times, under a load at
// depth 1 (mq-deadline favoured), then 32 (none), then 1 again: the
// disk's scheduler changes twice in all, then each daemon holds the
// switch to mq-deadline its window agrees on, and so does one after a
// reload that edits the margin.
// Before, each start counted from zero and first wrote the probe's winner
// back: two writes a restart.
func TestIntegrationAdaptBudgetSurvivesKill(t *testing.T) {
	requireLoops(t)
	bin := buildIosched(t)
	l := looptest.AddSlow(t, 23502, 64<<20, phasedPerRead)
	name := l.Name
	setScheduler(t, name, "none")
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	seeds := seedCrossing(t, fs, name, crossingFigures())
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	pol := func(margin string) string {
		return adaptivePolicy(name, seeds, "200ms", "1s", fmt.Sprintf("max_switches_per_day = 2\nmargin = %q", margin), "")
	}
	writeFile(t, policyPath, pol("10%"))
	runtimeDir := filepath.Join(dir, "run")
	writes := countSchedulerWrites(t, name)

	startDaemon := func() (*exec.Cmd, *ueventtest.LogBuffer) {
		t.Helper()
		log := &ueventtest.LogBuffer{}
		cmd := exec.Command(bin, "--policy", policyPath, "--lock-file", filepath.Join(dir, "disks.lock"), "daemon",
			"--runtime-dir", runtimeDir, "--state-dir", filepath.Join(dir, "state"))
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, log
	}
	// ownState is the state file of the daemon cmd (not of one killed
	// before it), nil until it wrote one.
	ownState := func(cmd *exec.Cmd) *statefile.State {
		st, err := statefile.Read(runtimeDir)
		if err != nil || st.PID != cmd.Process.Pid {
			return nil
		}
		return st
	}
	heldByCap := func(st *statefile.State) bool {
		ds := st.Disks[name]
		return ds != nil && ds.Adapt != nil && strings.HasPrefix(ds.Adapt.Held, "max_switches_per_day 2")
	}

	for i, depth := range []int{1, 32, 1, 1, 1} {
		rd := startReader(t, name, depth)
		cmd, log := startDaemon()
		what := fmt.Sprintf("daemon %d (depth %d): ", i+1, depth)
		if i < 2 {
			waitFor(t, 30*time.Second, what+"its switch", func() bool { return writes.n.Load() >= int64(i+1) })
		} else {
			waitFor(t, 30*time.Second, what+"a switch held by the cap", func() bool {
				st := ownState(cmd)
				return writes.n.Load() > 2 || st != nil && heldByCap(st)
			})
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		rd.stop(t)
		if n := writes.n.Load(); n > 2 {
			t.Fatalf("%s%d scheduler writes in all, past max_switches_per_day = 2; its log:\n%s", what, n, tail(log.String(), 30))
		}
	}

	// A margin edited (the daemon follows its file) keeps the count.
	rd := startReader(t, name, 1)
	cmd, log := startDaemon()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitFor(t, 30*time.Second, "the last daemon: a switch held by the cap", func() bool {
		st := ownState(cmd)
		return writes.n.Load() > 2 || st != nil && heldByCap(st)
	})
	writeFile(t, policyPath, pol("12%"))
	waitFor(t, 30*time.Second, "the reload of the edited margin, then a switch held by the cap", func() bool {
		st := ownState(cmd)
		return writes.n.Load() > 2 || st != nil && st.LastReload != nil && st.LastReload.OK && heldByCap(st) &&
			st.Disks[name].Adapt.AgreeingSince != nil && st.Disks[name].Adapt.AgreeingSince.After(st.LastReload.At)
	})
	rd.stop(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the last daemon's exit: %v\n%s", err, tail(log.String(), 30))
	}
	if n := writes.n.Load(); n != 2 {
		t.Errorf("%d scheduler writes in all, want the 2 max_switches_per_day allows", n)
	}
	if s := activeScheduler(t, name); s != "none" {
		t.Errorf("scheduler at the end %s, want none (the second switch's)", s)
	}
}
