package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loops 7540-7579: adaptive rules on emulated disks (internal/diskemu).
const emuLoops = 7540

// emuProfile is a disk profile as this machine can serve it: slowed so
// that the emulator's server keeps up on two busy CPUs (the factors the
// emulator's own model test holds it to). guard: the rule runs the guard
// rail.
type emuProfile struct {
	name  string
	slow  float64
	guard bool
}

var emuProfiles = []emuProfile{
	{"network-ssd", 15, false},
	{"burst", 10, true},
	{"spinning", 3, false},
}

// modelCrossing is the seeded probe result for p: the emulator's model
// IOPS at each probe depth for none, and for mq-deadline the same curve
// bent so the two cross between depths 2 and 8 (ahead by 15% at depths 1
// and 2, behind by a third from depth 8), the shape of crossingFigures on
// the profile's own scale. The emulated device serves in arrival order
// whatever the scheduler, so the test holds the controller to the seeded
// curves, not to a difference the disk would show.
func modelCrossing(p diskemu.Profile) []probe.Candidate {
	curve := func(bend []float64) []probe.CurvePoint {
		pts := make([]probe.CurvePoint, len(crossingDepths))
		for i, d := range crossingDepths {
			v := p.Model(d, 4096, 0, 0) * bend[i]
			pts[i] = probe.CurvePoint{Depth: d, ObservedDepth: float64(d), IOPS: v, P50us: 1e6 / v * float64(d), P99us: 2e6 / v * float64(d)}
		}
		return pts
	}
	cand := func(name string, c []probe.CurvePoint) probe.Candidate {
		f := probe.Figures{IOPS: c[len(c)-1].IOPS, P99us: c[len(c)-1].P99us, QD1IOPS: c[0].IOPS, QD1P99: c[0].P99us}
		return probe.Candidate{Scheduler: name, Figures: f, Curve: c,
			Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f, Curve: c}}}
	}
	return []probe.Candidate{
		cand("none", curve([]float64{1, 1, 1, 1})),
		cand("mq-deadline", curve([]float64{1.15, 1.15, 2.0 / 3, 2.0 / 3})),
	}
}

// emuPolicy adapts name on the seeded curves, margin 10%, no guard: the
// phases hold the controller to the curves and the window, each switch
// one the test expects. emuGuardPolicy is the same with the guard rail.
func emuGuardPolicy(name, seeds string) string {
	return strings.Replace(emuPolicy(name, seeds), "guard = false", "guard = true", 1)
}

func emuPolicy(name, seeds string) string {
	return fmt.Sprintf(`
[[rule]]
name = "adaptive"
[rule.match]
name = [%q]
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
depth = 32
depths = [1, 2, 8, 32]
[rule.adapt]
sample = %q
window = %q
margin = "10%%"
min_interval = "0s"
guard = false
[daemon]
probe_results = [%q]
`, name, phasedSample.String(), phasedWindow.String(), seeds)
}

// TestIntegrationAdaptEmulated: on the network-ssd, burst and spinning
// profiles (slowed), each behind a real loop device, with probe curves
// seeded from the emulator's model that cross between depths 2 and 8,
// the in-process daemon runs phased loads: idle, depth 1, depth 32, a
// load hovering at the crossing (depths 2 to 4), a load alternating
// between depths 1 and 32 in cycles about a window long, and idle
// again. The disk switches to mq-deadline in the depth-1 phase and back
// to none in the depth-32 phase, once each, and nowhere else: a poller
// reading queue/scheduler counts exactly two changes, and the state file
// says two switches today, the last to none.
//
// The burst profile runs with the guard rail, on credits that last until
// the depth-32 phase: three samples after its switch to none they run
// out (the emulator's `credits 0`), and IOPS fall to the baseline, a
// tenth, for the rest of the test. The guard sees latency per I/O at
// depth 32 rise manyfold, but not from the switch on: no switch back, no
// pin, and its verdict in the state file says so.
func TestIntegrationAdaptEmulated(t *testing.T) {
	requireLoops(t)
	for i, ep := range emuProfiles {
		t.Run(ep.name, func(t *testing.T) {
			p, err := diskemu.Lookup(ep.name)
			if err != nil {
				t.Fatal(err)
			}
			p = p.Slowed(ep.slow)
			if ep.name == "burst" {
				// Credits for far longer than the test drives the disk.
				p.IOPS[len(p.IOPS)-1].Burst = 1e6
			}
			e := diskemu.Start(t, emuLoops+i, p, 1<<30)
			name := e.Name
			setScheduler(t, name, "none")
			fs, err := sysfs.NewFS("")
			if err != nil {
				t.Fatal(err)
			}
			seeds := seedCrossing(t, fs, name, modelCrossing(p))
			writes := countSchedulerWrites(t, name)
			log := &sampleLog{name: name}
			log.enter("start", 0)
			pol := emuPolicy(name, seeds)
			if ep.guard {
				pol = emuGuardPolicy(name, seeds)
			}
			r := start(t, pol, withStateDir(t.TempDir()), func(c *Config) { c.hooks.adaptSampled = log.hook })
			waitFor(t, 10*time.Second, "the seeded decision on the disk, followed", func() bool {
				return activeScheduler(t, name) == "none" && len(log.of("start")) > 0
			})
			windowSamples := int(phasedWindow / phasedSample)
			samplesPast := func(phase string, since time.Time, n int) {
				t.Helper()
				waitFor(t, phasedWindow+time.Duration(n+10)*phasedSample, fmt.Sprintf("%d samples of the %s phase", n, phase), func() bool {
					c := 0
					for _, s := range log.of(phase) {
						if s.at.After(since) {
							c++
						}
					}
					return c >= n
				})
			}
			noSwitch := func(phase string) {
				t.Helper()
				if sw := switchesOf(log.of(phase)); len(sw) > 0 {
					for _, s := range log.of(phase) {
						t.Logf("%s: %s driven %d busy depth %.1f busy %.2f %s %v", phase, s.at.Format("05.000"), s.driven, s.point.BusyDepth, s.point.Busy, s.scheduler, s.dec.Switch)
					}
					t.Errorf("%s: %d switches, first %s -> %s at busy depth %.1f (%s)", phase, len(sw), sw[0].dec.From, sw[0].dec.To, sw[0].point.BusyDepth, sw[0].dec.Reason)
				}
			}
			idle := func(phase string) {
				t.Helper()
				log.enter(phase, 0)
				samplesPast(phase, time.Now(), windowSamples+2)
				noSwitch(phase)
			}
			// driven runs a reader at depth until the phase's switch to
			// want and a window and two samples more; then (if not nil)
			// is called once the switch is seen.
			driven := func(phase string, depth int, want string, then func(switched sampled)) {
				t.Helper()
				log.enter(phase, depth)
				rd := startReader(t, name, depth)
				waitFor(t, 3*phasedWindow+5*time.Second, phase+": the switch to "+want, func() bool {
					return len(switchesOf(log.of(phase))) > 0
				})
				first := switchesOf(log.of(phase))[0]
				if first.dec.To != want {
					t.Errorf("%s: switched %s -> %s (%s), want %s", phase, first.dec.From, first.dec.To, first.dec.Reason, want)
				}
				if then != nil {
					then(first)
				}
				samplesPast(phase, first.at, windowSamples+2)
				rd.stop(t)
				if sw := switchesOf(log.of(phase)); len(sw) != 1 {
					t.Errorf("%s: %d switches, want 1", phase, len(sw))
				}
				if s := activeScheduler(t, name); s != want {
					t.Errorf("%s: scheduler %s after the phase, want %s", phase, s, want)
				}
			}
			// swing runs depths in turn, each for every, for three windows,
			// after a pause of a few idle samples: an idle sample breaks
			// any agreement, so the phase before (a hover that ended at
			// depth 2, say) cannot lend its samples to this one's window.
			swing := func(phase string, every time.Duration, depths ...int) {
				t.Helper()
				log.enter(phase+" (pause)", 0)
				time.Sleep(4 * phasedSample) // the load's shape, not a wait for an outcome
				log.enter(phase, depths[0])
				begin := time.Now()
				for i := 0; time.Since(begin) < 3*phasedWindow; i++ {
					d := depths[i%len(depths)]
					log.enter(phase, d)
					rd := startReader(t, name, d)
					time.Sleep(every) // the load's shape, not a wait for an outcome
					rd.stop(t)
				}
				if n := len(log.of(phase)); n < 3*windowSamples-3 {
					t.Errorf("%s: %d samples over three windows of %d", phase, n, windowSamples)
				}
				noSwitch(phase)
			}

			// The cliff: three samples after the switch (the one spanning
			// it, the first the guard compares, one more), and half a
			// sample, so that the guard's first sample after the switch
			// is on credits.
			var cliff func(sampled)
			if ep.guard {
				cliff = func(sw sampled) {
					time.Sleep(time.Until(sw.at.Add(3*phasedSample + phasedSample/2))) // the load's shape, not a wait for an outcome
					if left := e.SetCredits(t, 0); left != 0 {
						t.Fatalf("credits left %g, want 0", left)
					}
				}
			}
			idle("idle")
			driven("depth 1", 1, "mq-deadline", nil)
			driven("depth 32", 32, "none", cliff)
			swing("hover", phasedWindow/4, 2, 3, 4, 3)
			// A cycle of depth 1 then 32 about a window long (starting and
			// stopping a reader, and draining 32 reads, take some of it):
			// no depth lasts a window.
			swing("alternating", phasedWindow*2/5, 1, 32)
			idle("idle after")

			if n := writes.n.Load(); n != 2 {
				t.Errorf("%d scheduler changes on the disk, want 2", n)
			}
			if s := activeScheduler(t, name); s != "none" {
				t.Errorf("scheduler at the end %s, want none", s)
			}
			st := r.diskState(t, name)
			if st == nil || st.Adapt == nil || st.Adapt.SwitchesToday != 2 || st.Adapt.LastSwitch == nil || st.Adapt.LastSwitch.To != "none" {
				t.Fatalf("adaptive state at the end: %+v", st)
			}
			if ep.guard {
				// The guard compared the switch to none across the cliff
				// and kept it.
				a := st.Adapt
				if a.PinnedUntil != nil || a.GuardCleared != nil ||
					!strings.Contains(a.GuardVerdict, "after the switch to none, but the first sample after it was at") ||
					!strings.Contains(a.GuardVerdict, "the rise came later, not the switch's doing; kept") {
					t.Errorf("the guard's verdict %q, pinned until %v, cleared %+v", a.GuardVerdict, a.PinnedUntil, a.GuardCleared)
				}
				t.Logf("the guard: %s", a.GuardVerdict)
				for _, s := range log.of("depth 32") {
					t.Logf("depth 32: %s busy depth %.1f IOPS %.0f latency %.0fus %s", s.at.Format("05.000"), s.point.BusyDepth, s.point.IOPS(), s.point.LatencyUs, s.scheduler)
				}
			}
		})
	}
}
