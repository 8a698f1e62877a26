package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loops 22500-22509: probed by the daemon, backed by files in /dev/shm.

// probedLoop makes a /dev/shm-backed loop device running kyber (a scheduler
// no probe here has as a candidate, so its restoring can be seen).
func probedLoop(t *testing.T, n int) string {
	t.Helper()
	l := looptest.Add(t, n)
	l.Bind(t, 32<<20)
	setScheduler(t, l.Name, "kyber")
	return l.Name
}

func setScheduler(t *testing.T, name, sched string) {
	t.Helper()
	if err := os.WriteFile("/sys/block/"+name+"/queue/scheduler", []byte(sched), 0); err != nil {
		t.Fatalf("%s: cannot set %s: %v", name, sched, err)
	}
}

func activeScheduler(t *testing.T, name string) string {
	t.Helper()
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fs.ReadQueueAttr(name, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// probePolicy probes name (only) with the given duration and rounds; the
// rule sets nr_requests at once and no scheduler (no interim).
func probePolicy(name, duration string, rounds int, extra string) string {
	return fmt.Sprintf(`
[[rule]]
name = "probed"
[rule.match]
name = [%q]
[rule.set]
nr_requests = 64
[rule.probe]
candidates = ["none", "mq-deadline"]
duration = %q
rounds = %d
depth = 8
%s`, name, duration, rounds, extra)
}

func (r *running) diskState(t *testing.T, name string) *statefile.DiskState {
	t.Helper()
	b, err := os.ReadFile(statefile.Path(r.runtimeDir))
	if err != nil {
		return nil
	}
	var st statefile.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil
	}
	return st.Disks[name]
}

func withStateDir(dir string) func(*Config) {
	return func(c *Config) {
		c.StateDir = dir
		c.hooks.probeRetry = 200 * time.Millisecond // udev may read a new loop
	}
}

// TestIntegrationProbeDaemon: the daemon probes a disk once and applies the
// winner, with the probe's provenance in the log and the state; after a
// restart it reuses the remembered result without probing; a daemon with a
// fresh state directory takes the same result seeded from a file.
func TestIntegrationProbeDaemon(t *testing.T) {
	requireLoops(t)
	name := probedLoop(t, 22500)
	state := t.TempDir()
	pol := probePolicy(name, "150ms", 1, "")

	r := start(t, pol, withStateDir(state))
	var ds *statefile.DiskState
	waitFor(t, 20*time.Second, "the probe's decision in the state file", func() bool {
		ds = r.diskState(t, name)
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "decided"
	})
	winner := ds.Probe.Winner
	if winner != "none" && winner != "mq-deadline" || !strings.HasPrefix(ds.Probe.Provenance, "probe: ") || !strings.HasPrefix(ds.Probe.From, "probed ") {
		t.Fatalf("probe state %+v", ds.Probe)
	}
	waitFor(t, 5*time.Second, "the winner on the disk", func() bool { return activeScheduler(t, name) == winner })
	waitFor(t, 5*time.Second, "the winner in the state file", func() bool {
		ds = r.diskState(t, name)
		for _, s := range ds.Settings {
			if s.Attribute == "scheduler" && s.Value == winner && strings.Contains(s.Rule, "probe: ") {
				return true
			}
		}
		return false
	})
	if n := r.probes(name); n != 1 {
		t.Errorf("%d probes measured the disk, want 1", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "probes.json")); err != nil {
		t.Fatalf("the result is not remembered: %v", err)
	}

	// A restart: the remembered result, no probe.
	setScheduler(t, name, "kyber")
	r2 := start(t, pol, withStateDir(state))
	waitFor(t, 5*time.Second, "the remembered winner on the disk", func() bool { return activeScheduler(t, name) == winner })
	waitFor(t, 5*time.Second, "the remembered decision in the state file", func() bool {
		ds = r2.diskState(t, name)
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "decided" && strings.HasPrefix(ds.Probe.From, "remembered ")
	})
	if n := r2.probes(name); n != 0 {
		t.Errorf("after a restart: %d probes, want the remembered decision and none", n)
	}
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}

	// A fresh state directory, the result seeded from a file.
	seedDir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(state, "probes.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(seedDir, "fleet.json"), string(b))
	setScheduler(t, name, "kyber")
	seeded := probePolicy(name, "150ms", 1, fmt.Sprintf("[daemon]\nprobe_results = [%q]\n", filepath.Join(seedDir, "*.json")))
	r3 := start(t, seeded, withStateDir(t.TempDir()))
	waitFor(t, 5*time.Second, "the seeded winner on the disk", func() bool { return activeScheduler(t, name) == winner })
	waitFor(t, 5*time.Second, "the seeded decision in the state file", func() bool {
		ds = r3.diskState(t, name)
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "decided" && strings.HasPrefix(ds.Probe.From, "seeded from "+seedDir)
	})
	if n := r3.probes(name); n != 0 {
		t.Errorf("a seeded decision was probed again (%d probes)", n)
	}
}

// TestIntegrationProbeDaemonStop: a stop in the middle of a probe ends it,
// the disk's original scheduler is back, and the daemon exits within its
// stop bound.
func TestIntegrationProbeDaemonStop(t *testing.T) {
	requireLoops(t)
	name := probedLoop(t, 22501)
	state := t.TempDir()
	r := start(t, probePolicy(name, "2s", 3, ""), withStateDir(state), func(c *Config) { c.StopTimeout = 3 * time.Second })
	// In the middle of it: switched to a candidate, away from kyber.
	waitFor(t, 10*time.Second, "the probe to switch the disk to a candidate", func() bool {
		return r.d.probeHolds(name) && activeScheduler(t, name) != "kyber"
	})
	begin := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("the stop took %s, bound 3s", took)
	}
	if s := activeScheduler(t, name); s != "kyber" {
		t.Errorf("scheduler after the stop = %s, want kyber restored", s)
	}
	if _, err := os.Stat(filepath.Join(state, "probes.json")); err == nil {
		t.Errorf("a cancelled probe left a result")
	}
}

// TestIntegrationProbeDaemonReload: a reload during a probe cancels it (the
// disk's scheduler restored), and the re-plan probes again under the new
// policy and applies the winner.
func TestIntegrationProbeDaemonReload(t *testing.T) {
	requireLoops(t)
	name := probedLoop(t, 22502)
	r := start(t, probePolicy(name, "2s", 3, ""), withStateDir(t.TempDir()))
	waitFor(t, 10*time.Second, "the probe to start", func() bool { return r.probes(name) == 1 })
	writeFile(t, r.policy, probePolicy(name, "150ms", 1, ""))
	r.signals <- syscall.SIGHUP
	// One probe of a disk measures at a time: the second starts once the
	// first, cancelled, has ended.
	waitFor(t, 5*time.Second, "the second probe to start", func() bool { return r.probes(name) == 2 })
	var winner string
	waitFor(t, 5*time.Second, "the decision in the state file", func() bool {
		ds := r.diskState(t, name)
		if ds == nil || ds.Probe == nil || ds.Probe.Status != "decided" {
			return false
		}
		winner = ds.Probe.Winner
		return true
	})
	waitFor(t, 5*time.Second, "the winner on the disk", func() bool { return activeScheduler(t, name) == winner })
	if ds := r.diskState(t, name); !strings.Contains(ds.Probe.Provenance, "probe: ") || ds.Probe.Rule == "" {
		t.Errorf("the second probe's decision: %+v", ds.Probe)
	}
	if n := r.probes(name); n != 2 {
		t.Errorf("%d probes started, want 2 (one cancelled by the reload)", n)
	}
}

// TestIntegrationProbeDaemonConcurrency: with probe_concurrency 1 (the
// default) two disks are probed one after the other, never at once, and both
// get their winner.
func TestIntegrationProbeDaemonConcurrency(t *testing.T) {
	requireLoops(t)
	a, b := probedLoop(t, 22503), probedLoop(t, 22504)
	r := start(t, probePolicy("loop2250[34]", "150ms", 1, ""), withStateDir(t.TempDir()))
	for _, name := range []string{a, b} {
		waitFor(t, 20*time.Second, name+"'s decision", func() bool {
			ds := r.diskState(t, name)
			return ds != nil && ds.Probe != nil && ds.Probe.Status == "decided" && activeScheduler(t, name) == ds.Probe.Winner
		})
	}
	// One probe each, the second started measuring after the first's
	// decision.
	sa, sb := r.probeStarts(a), r.probeStarts(b)
	if len(sa) != 1 || len(sb) != 1 {
		t.Fatalf("probes started: %s %d, %s %d; want one each", a, len(sa), b, len(sb))
	}
	first, second := a, b
	if sb[0].Before(sa[0]) {
		first, second = b, a
	}
	decided := r.diskState(t, first).Probe.Since
	if started := r.probeStarts(second)[0]; started.Before(decided) {
		t.Errorf("%s's probe started at %s, before %s's was decided at %s: want one at a time",
			second, started.Format(time.StampMicro), first, decided.Format(time.StampMicro))
	}
}

// TestIntegrationProbeDaemonStuckDisk: the disk stops answering once the
// daemon's probe has switched its scheduler. The probe fails within its
// budget with its restore left waiting for the disk; meanwhile no pass
// writes the disk (its lock is the restore's). When the disk answers again,
// kyber and the values before the probe are back, and the disk is the
// daemon's passes' again. Before, the probe waited in its restore for as
// long as the disk did not answer, holding its probe slot.
func TestIntegrationProbeDaemonStuckDisk(t *testing.T) {
	requireLoops(t)
	l, gate := looptest.AddGated(t, 22505, 32<<20)
	name := l.Name
	setScheduler(t, name, "kyber")
	state := t.TempDir()
	r := start(t, probePolicy(name, "200ms", 1, ""), withStateDir(state))
	// The probe's first switch: the disk stops answering.
	waitFor(t, 10*time.Second, "the probe's first switch", func() bool {
		if s := activeScheduler(t, name); s != "kyber" {
			gate.Set(true)
			return true
		}
		return false
	})
	waitFor(t, 10*time.Second, "the probe to fail", func() bool {
		ds := r.diskState(t, name)
		return ds != nil && ds.Probe != nil && ds.Probe.Status == "failed"
	})
	if gate.Waiting() == 0 {
		t.Fatal("no read waits at the gate: the disk never stopped answering")
	}
	waitFor(t, 5*time.Second, "the probe's restore in flight in the state file", func() bool {
		ds := r.diskState(t, name)
		return ds != nil && slices.ContainsFunc(ds.InFlight, func(w statefile.InFlight) bool { return w.What == "restore" })
	})
	if s := activeScheduler(t, name); s == "kyber" {
		t.Fatal("kyber is back while the disk does not answer")
	}
	// A reconcile now must leave the disk alone: the restore holds it.
	mark := r.writes.Len()
	r.signals <- syscall.SIGUSR1
	if reconcile := r.waitScans(t, 1, "reconcile", 5*time.Second); reconcile.Writes != 0 {
		t.Errorf("the reconcile made %d writes while the disk's restore waits", reconcile.Writes)
	}
	if w := r.writes.Since(mark); len(w) != 0 {
		t.Errorf("a pass wrote the disk while its restore waits: %v", w)
	}

	gate.Set(false) // the disk answers again
	waitFor(t, 10*time.Second, "kyber back on the disk", func() bool { return activeScheduler(t, name) == "kyber" })
	waitFor(t, 10*time.Second, "the disk to be the passes' again", func() bool {
		return !r.d.probeHolds(name) && !r.otherProcessLocks(t).Held(name)
	})
	if v, err := os.ReadFile("/sys/block/" + name + "/queue/nr_requests"); err != nil || strings.TrimSpace(string(v)) != "64" {
		t.Errorf("nr_requests after the restore = %q (%v), want 64, as before the probe", v, err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
