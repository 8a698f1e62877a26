package adapt

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
)

// crossing is the seeded curve the integration test uses: mq-deadline
// ahead at depths 1-2 by 15%, none ahead from depth 8 by 50%; they cross
// near depth 2.4.
func crossing() (map[string][]probe.CurvePoint, []string) {
	return map[string][]probe.CurvePoint{
		"none":        pts(1, 1000, 2, 2000, 8, 6000, 32, 9000),
		"mq-deadline": pts(1, 1150, 2, 2300, 8, 4000, 32, 6000),
	}, []string{"none", "mq-deadline"}
}

// kernelList is the virtio-blk figures of TestFavourKernelListFigures.
func kernelList() (map[string][]probe.CurvePoint, []string) {
	return map[string][]probe.CurvePoint{
		"none":        pts(1, 86100, 128, 450000),
		"mq-deadline": pts(1, 100000, 128, 270000),
	}, []string{"none", "mq-deadline"}
}

// loopOwn is a loop device's own measured curve: none ahead at every
// depth.
func loopOwn() (map[string][]probe.CurvePoint, []string) {
	return map[string][]probe.CurvePoint{
		"none":        pts(1, 60000, 2, 110000, 32, 152000),
		"mq-deadline": pts(1, 50000, 2, 90000, 32, 120000),
	}, []string{"none", "mq-deadline"}
}

// phase is a stretch of load: for dur, every sample at depth (one of
// depths in turn when set: a load that moves; 0 there is an idle sample),
// busy and latency.
type phase struct {
	dur     time.Duration
	depth   float64
	depths  []float64
	busy    float64
	latency time.Duration
	// latencyOn overrides latency while the disk runs that scheduler
	// (the guard rail's test: the curve was wrong for this workload).
	latencyOn map[string]time.Duration
}

func idle(dur time.Duration) phase {
	return phase{dur: dur, depth: 0.02, busy: 0.001, latency: 100 * time.Microsecond}
}

func load(dur time.Duration, depth float64) phase {
	return phase{dur: dur, depth: depth, busy: 0.9, latency: time.Duration(depth * 100 * float64(time.Microsecond))}
}

// wantSwitch is a switch expected within [after, by] of the start.
type wantSwitch struct {
	to        string
	after, by time.Duration
	revert    bool
	reason    string // a part of the provenance
}

type switchSeen struct {
	at time.Duration
	d  Decision
}

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// run feeds the phases one sample every opt.Sample on a fake clock,
// carrying out each switch, and returns the switches with their time
// since t0.
func run(t *testing.T, opt adaptopt.Options, curves map[string][]probe.CurvePoint, order []string, start string, phases []phase) ([]switchSeen, *Controller) {
	t.Helper()
	c, err := NewController(opt, curves, order, start)
	if err != nil {
		t.Fatal(err)
	}
	var seen []switchSeen
	now, sched := t0, start
	for _, p := range phases {
		end := now.Add(p.dur)
		for i := 0; now.Before(end); i++ {
			now = now.Add(opt.Sample)
			depth, busy := p.depth, p.busy
			if len(p.depths) > 0 {
				depth = p.depths[i%len(p.depths)]
			}
			if depth == 0 { // an idle sample in a moving load
				depth, busy = 0.02, 0.001
			}
			lat := p.latency
			if l, ok := p.latencyOn[sched]; ok {
				lat = l
			}
			d := c.Observe(Sample{At: now, Scheduler: sched, BusyDepth: depth, Busy: busy, IOPS: 1000 * busy, Latency: lat})
			if d.Switch {
				if d.From != sched {
					t.Errorf("switch at %s from %s, but the disk ran %s", now.Sub(t0), d.From, sched)
				}
				seen = append(seen, switchSeen{now.Sub(t0), d})
				sched = d.To
			}
		}
	}
	return seen, c
}

func fastOpt() adaptopt.Options {
	o := adaptopt.Default()
	o.Sample, o.Window, o.MinInterval = time.Second, 10*time.Second, 0
	return o
}

func TestControllerScenarios(t *testing.T) {
	t.Parallel()
	const S, W = time.Second, 10 * time.Second
	minutes := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	for _, tc := range []struct {
		name   string
		opt    func(*adaptopt.Options)
		curves func() (map[string][]probe.CurvePoint, []string)
		start  string
		phases []phase
		want   []wantSwitch
	}{
		{
			// Each phase ends on its side of the crossing within one
			// window plus one sample, with one switch a phase; the idle
			// phase switches nothing.
			name: "phases", curves: crossing, start: "none",
			phases: []phase{load(3*W, 1), load(3*W, 32), idle(5 * W), load(3*W, 1.5)},
			want: []wantSwitch{
				{to: "mq-deadline", after: W, by: W + S, reason: "adapt: busy depth 1 over 10s; curve: mq-deadline 1.15x none at depth 1"},
				{to: "none", after: 3*W + W - S, by: 3*W + W + S, reason: "adapt: busy depth 32 over 10s; curve: none 1.50x mq-deadline at depth 32"},
				{to: "mq-deadline", after: 11*W + W - S, by: 11*W + W + S, reason: "busy depth 1.5 over 10s"},
			},
		},
		{
			// Already on the right side: nothing to do.
			name: "already right", curves: crossing, start: "mq-deadline",
			phases: []phase{load(5*W, 1)},
		},
		{
			name: "idle never switches", curves: crossing, start: "none",
			phases: []phase{idle(20 * W)},
		},
		{
			// Busy and idle samples in turn: an idle sample is no
			// agreement, so the window never agrees.
			name: "idle breaks agreement", curves: crossing, start: "none",
			phases: []phase{{dur: 20 * W, depths: []float64{1, 0}, busy: 0.9, latency: time.Millisecond}},
		},
		{
			// Hovering inside the margin of the crossing: neither is
			// favoured by more than 10%.
			name: "hovering in the margin", curves: crossing, start: "none",
			phases: []phase{{dur: 30 * W, depths: []float64{2.2, 2.4, 2.6, 2.8, 2.5, 2.3}, busy: 0.9, latency: time.Millisecond}},
		},
		{
			// Every third sample favours mq-deadline by only 3%: the
			// window's median (depth 1) says 15%, but the window as a
			// whole did not favour it by more than the margin.
			name: "part of the window within the margin", curves: crossing, start: "none",
			phases: []phase{{dur: 30 * W, depths: []float64{1, 1, 2.3}, busy: 0.9, latency: time.Millisecond}},
		},
		{
			// Swinging across the crossing faster than a window: each
			// sample has a strong verdict, but they never agree for a
			// whole window.
			name: "swinging across the crossing", curves: crossing, start: "none",
			phases: []phase{{dur: 30 * W, depths: []float64{1.5, 1.5, 1.5, 6, 6, 6, 6, 1.8, 1.8}, busy: 0.9, latency: time.Millisecond}},
		},
		{
			// Most of a window on one side, then a sample on the other:
			// the window starts again.
			name: "almost a window", curves: crossing, start: "none",
			phases: []phase{load(W-2*S, 1), load(S, 4), load(W-2*S, 1), load(S, 16), load(W-S, 1)},
		},
		{
			// A loop's own curve: none wins at every depth, and the disk
			// is never moved away from it.
			name: "winner at every depth", curves: loopOwn, start: "none",
			phases: []phase{load(3*W, 1), load(3*W, 2), load(3*W, 32), idle(W), load(3*W, 1)},
		},
		{
			// From another scheduler, the winner at every depth is
			// reached once and kept.
			name: "winner at every depth from mq-deadline", curves: loopOwn, start: "mq-deadline",
			phases: []phase{load(3*W, 1), load(3*W, 32)},
			want:   []wantSwitch{{to: "none", after: W, by: W + S, reason: "none 1.20x mq-deadline at depth 1"}},
		},
		{
			// The kernel list's virtio-blk figures: depth 1 favours
			// mq-deadline by 16%, depth 128 none by 67%.
			name: "kernel list figures", curves: kernelList, start: "none",
			phases: []phase{load(2*W, 1), load(2*W, 128)},
			want: []wantSwitch{
				{to: "mq-deadline", after: W, by: W + S, reason: "curve: mq-deadline 1.16x none at depth 1"},
				{to: "none", after: 3 * W, by: 3*W + S, reason: "adapt: busy depth 128 over 10s; curve: none 1.67x mq-deadline at depth 128"},
			},
		},
		{
			// A 20% margin: the kernel list's depth-1 gain (16%) is not
			// enough, depth 128's (67%) is.
			name: "margin holds a small gain", curves: kernelList, start: "none",
			opt:    func(o *adaptopt.Options) { o.Margin = 0.2 },
			phases: []phase{load(3*W, 1)},
		},
		{
			// min_interval: the second switch waits for it, then goes at
			// once (the window has agreed all along).
			name: "min_interval", curves: crossing, start: "none",
			opt:    func(o *adaptopt.Options) { o.MinInterval = minutes(5) },
			phases: []phase{load(2*W, 1), load(10*minutes(1), 32)},
			want: []wantSwitch{
				{to: "mq-deadline", after: W, by: W + S},
				{to: "none", after: W + minutes(5), by: W + minutes(5)},
			},
		},
		{
			// max_switches_per_day: phases that each earn a switch, but
			// only 3 in 24 hours; the fourth waits a day after the first.
			name: "max_switches_per_day", curves: crossing, start: "none",
			opt: func(o *adaptopt.Options) { o.MaxSwitchesPerDay = 3 },
			phases: []phase{
				load(2*W, 1), load(2*W, 32), load(2*W, 1), // 3 switches
				load(24*time.Hour-6*W, 32), // held
				load(W, 32),                // the first switch is a day old
			},
			want: []wantSwitch{
				{to: "mq-deadline", after: W, by: W + S},
				{to: "none", after: 3 * W, by: 3*W + S},
				{to: "mq-deadline", after: 5 * W, by: 5*W + S},
				{to: "none", after: W + 24*time.Hour, by: W + 24*time.Hour},
			},
		},
		{
			// The guard rail: the curve says none at depth 32, but on
			// this workload none's latency per I/O is 40% worse. One
			// window after the switch it switches back and pins the disk
			// for a day, though the curve goes on favouring none; after
			// the day it may try again.
			name: "guard rail switches back and pins", curves: crossing, start: "mq-deadline",
			phases: []phase{
				{dur: 24*time.Hour + 10*W, depth: 32, busy: 0.9, latency: time.Millisecond,
					latencyOn: map[string]time.Duration{"none": 1400 * time.Microsecond}},
			},
			want: []wantSwitch{
				{to: "none", after: W, by: W + S},
				{to: "mq-deadline", revert: true, after: 2 * W, by: 2*W + S,
					reason: "adapt: guard: latency per I/O at busy depth 32 rose 40% (1000us to 1400us) after the switch to none; back to mq-deadline, pinned until 2026-12-02T00:00:20Z"},
				{to: "none", after: 2*W + 24*time.Hour, by: 2*W + 24*time.Hour},
				{to: "mq-deadline", revert: true, after: 3*W + 24*time.Hour, by: 3*W + 24*time.Hour + S},
			},
		},
		{
			// The guard compares like with like: better latency keeps
			// the switch.
			name: "guard keeps a good switch", curves: crossing, start: "mq-deadline",
			phases: []phase{
				{dur: 10 * W, depth: 32, busy: 0.9, latency: time.Millisecond,
					latencyOn: map[string]time.Duration{"none": 700 * time.Microsecond}},
			},
			want: []wantSwitch{{to: "none", after: W, by: W + S}},
		},
		{
			// Worse, but within the margin: kept.
			name: "guard within the margin", curves: crossing, start: "mq-deadline",
			phases: []phase{
				{dur: 10 * W, depth: 32, busy: 0.9, latency: time.Millisecond,
					latencyOn: map[string]time.Duration{"none": 1090 * time.Microsecond}},
			},
			want: []wantSwitch{{to: "none", after: W, by: W + S}},
		},
		{
			// guard = false: an admin who trusts the seed.
			name: "guard off", curves: crossing, start: "mq-deadline",
			opt: func(o *adaptopt.Options) { o.Guard = false },
			phases: []phase{
				{dur: 10 * W, depth: 32, busy: 0.9, latency: time.Millisecond,
					latencyOn: map[string]time.Duration{"none": 3 * time.Millisecond}},
			},
			want: []wantSwitch{{to: "none", after: W, by: W + S}},
		},
		{
			// After the switch the load moved to depth 4 (not within
			// 1.5x of 32): nothing to compare, so no switch back however
			// slow it is there.
			name: "guard needs a similar depth", curves: crossing, start: "mq-deadline",
			phases: []phase{
				load(W, 32),
				{dur: 10 * W, depth: 12, busy: 0.9, latency: 50 * time.Millisecond},
			},
			want: []wantSwitch{{to: "none", after: W, by: W + S}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := fastOpt()
			if tc.opt != nil {
				tc.opt(&opt)
			}
			curves, order := tc.curves()
			seen, _ := run(t, opt, curves, order, tc.start, tc.phases)
			var got, want []string
			for _, s := range seen {
				got = append(got, fmt.Sprintf("%s->%s revert=%v at %s: %s", s.d.From, s.d.To, s.d.Revert, s.at, s.d.Reason))
			}
			for _, w := range tc.want {
				want = append(want, fmt.Sprintf("->%s revert=%v in [%s, %s]: %q", w.to, w.revert, w.after, w.by, w.reason))
			}
			ok := len(seen) == len(tc.want)
			for i := 0; ok && i < len(seen); i++ {
				s, w := seen[i], tc.want[i]
				ok = s.d.To == w.to && s.d.Revert == w.revert && s.at >= w.after && s.at <= w.by && strings.Contains(s.d.Reason, w.reason)
			}
			if !ok {
				t.Errorf("switches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestControllerState(t *testing.T) {
	t.Parallel()
	const W = 10 * time.Second
	curves, order := crossing()
	_, c := run(t, fastOpt(), curves, order, "mq-deadline", []phase{
		{dur: 24*time.Hour + 10*W, depth: 32, busy: 0.9, latency: time.Millisecond,
			latencyOn: map[string]time.Duration{"none": 1400 * time.Microsecond}},
	})
	st := c.State()
	end := t0.Add(24*time.Hour + 10*W)
	if st.Scheduler != "mq-deadline" || st.Depth != 32 || math.Abs(st.Busy-0.9) > 1e-9 || st.Span != W ||
		st.Favoured != "none" || st.Gain < 0.49 || st.Gain > 0.51 {
		t.Errorf("window: %+v", st)
	}
	if st.Agreeing != "none" || !st.AgreeingSince.Equal(t0.Add(24*time.Hour+3*W)) {
		t.Errorf("agreeing %q since %s", st.Agreeing, st.AgreeingSince)
	}
	if !st.LastSwitch.Equal(t0.Add(24*time.Hour+3*W)) || st.LastFrom != "none" || st.LastTo != "mq-deadline" ||
		!strings.HasPrefix(st.LastReason, "adapt: guard: ") {
		t.Errorf("last switch: %+v", st)
	}
	if !st.PinnedUntil.Equal(t0.Add(48*time.Hour+3*W)) || !st.PinnedUntil.After(end) {
		t.Errorf("pinned until %s", st.PinnedUntil)
	}
	// The switches of the first day are over 24 hours old.
	if st.SwitchesToday != 2 || st.Guarding {
		t.Errorf("switches today %d, guarding %v", st.SwitchesToday, st.Guarding)
	}
	if want := "pinned by the guard rail until 2026-12-03T00:00:30Z"; st.Held != want {
		t.Errorf("held %q, want %q", st.Held, want)
	}

}

// A scheduler changed behind the controller's back (an admin, a failed
// write) starts the agreement again: the window must agree on the
// scheduler the disk really has.
func TestControllerExternalChange(t *testing.T) {
	t.Parallel()
	curves, order := crossing()
	c, err := NewController(fastOpt(), curves, order, "none")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for s := 1; s <= 9; s++ {
		if d := c.Observe(Sample{At: at(s), Scheduler: "none", BusyDepth: 1, Busy: 1, IOPS: 1000, Latency: time.Millisecond}); d.Switch {
			t.Fatalf("switch at %ds: %+v", s, d)
		}
	}
	// kyber, not a candidate: compared with the runner-up (none), which
	// mq-deadline beats by 15% at depth 1; the agreement starts at 9s.
	for s := 10; s <= 18; s++ {
		if d := c.Observe(Sample{At: at(s), Scheduler: "kyber", BusyDepth: 1, Busy: 1, IOPS: 1000, Latency: time.Millisecond}); d.Switch {
			t.Fatalf("switch at %ds, %ds after the change: %+v", s, s-9, d)
		}
	}
	d := c.Observe(Sample{At: at(19), Scheduler: "kyber", BusyDepth: 1, Busy: 1, IOPS: 1000, Latency: time.Millisecond})
	if !d.Switch || d.From != "kyber" || d.To != "mq-deadline" {
		t.Errorf("a window after the change: %+v", d)
	}
	// A sample not after the last is ignored.
	if d := c.Observe(Sample{At: at(19), Scheduler: "none", BusyDepth: 64, Busy: 1, IOPS: 1000}); d.Switch || c.State().Scheduler != "mq-deadline" {
		t.Errorf("a repeated sample: %+v, %+v", d, c.State())
	}
}

// Reset (a gap in the samples) and new curves start the agreement again.
func TestControllerResetAndSetCurves(t *testing.T) {
	t.Parallel()
	curves, order := crossing()
	c, err := NewController(fastOpt(), curves, order, "none")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	feed := func(from, to int) (int, Decision) {
		for s := from; s <= to; s++ {
			if d := c.Observe(Sample{At: at(s), Scheduler: "none", BusyDepth: 1, Busy: 1, IOPS: 1000, Latency: time.Millisecond}); d.Switch {
				return s, d
			}
		}
		return 0, Decision{}
	}
	if s, d := feed(1, 9); d.Switch {
		t.Fatalf("switch at %ds", s)
	}
	c.Reset()
	if st := c.State(); st.Span != 0 || st.Agreeing != "" {
		t.Errorf("after Reset: %+v", st)
	}
	// The first sample after a reset counts as one sample interval.
	if s, d := feed(100, 120); s != 109 || d.To != "mq-deadline" {
		t.Errorf("after Reset: switch at %ds, %+v; want at 109s", s, d)
	}

	c, _ = NewController(fastOpt(), curves, order, "none")
	if s, d := feed(1, 9); d.Switch {
		t.Fatalf("switch at %ds", s)
	}
	own, ownOrder := loopOwn()
	c.SetCurves(own, ownOrder)
	if s, d := feed(10, 100); d.Switch {
		t.Errorf("switch at %ds on curves where none wins everywhere: %+v", s, d)
	}
	c.SetCurves(curves, order)
	if s, _ := feed(101, 200); s != 110 {
		t.Errorf("new curves: switch at %ds, want 110s", s)
	}
}

// A controller's memory is fixed: however many samples its window holds
// (a long window, samples faster than the policy's interval), a sample
// in steady state allocates nothing, and the window covers no more than
// the policy's window.
func TestControllerFixedMemory(t *testing.T) {
	curves, order := crossing()
	for _, o := range []struct{ sample, window, every time.Duration }{
		{5 * time.Second, 10 * time.Minute, 5 * time.Second},
		{time.Second, adaptopt.MaxWindowSamples * time.Second, time.Second},
		{time.Second, 10 * time.Second, time.Millisecond},
	} {
		opt := fastOpt()
		opt.Sample, opt.Window = o.sample, o.window
		c, err := NewController(opt, curves, order, "none")
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		// A load that moves across the crossing: every sample has a
		// verdict, the window never agrees; then, on the right side
		// already, one that agrees all along.
		depths := []float64{1.5, 1.5, 6, 6, 6, 1.8}
		i := 0
		sample := func() {
			now = now.Add(o.every)
			c.Observe(Sample{At: now, Scheduler: c.current, BusyDepth: depths[i%len(depths)], Busy: 0.9, IOPS: 900, Latency: time.Millisecond})
			c.State()
			i++
		}
		for range 3 * int(o.window/o.every) {
			sample()
		}
		if n := testing.AllocsPerRun(1000, sample); n != 0 {
			t.Errorf("%s window, a sample every %s: %v allocations a sample", o.window, o.every, n)
		}
		if st := c.State(); st.Span > o.window || st.Span < o.window-o.window/observe.Slots-o.every {
			t.Errorf("%s window, a sample every %s: the window spans %s", o.window, o.every, st.Span)
		}
	}
	t.Logf("a Controller is %d bytes, its window included", unsafe.Sizeof(Controller{}))
}

func TestNewControllerRefusesBadOptions(t *testing.T) {
	t.Parallel()
	curves, order := crossing()
	opt := fastOpt()
	opt.Window = opt.Sample
	if _, err := NewController(opt, curves, order, "none"); err == nil || !strings.Contains(err.Error(), "sample and window:") {
		t.Errorf("err = %v", err)
	}
}

func TestFormats(t *testing.T) {
	t.Parallel()
	for d, want := range map[float64]string{1: "1", 1.5: "1.5", 2.44: "2.4", 9.96: "10", 23.4: "23", 128: "128"} {
		if got := fmtDepth(d); got != want {
			t.Errorf("fmtDepth(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m", 2 * time.Second: "2s", 1500 * time.Millisecond: "1.5s"} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// Held names what keeps an agreed switch waiting.
func TestControllerHeld(t *testing.T) {
	t.Parallel()
	const W = 10 * time.Second
	curves, order := crossing()
	opt := fastOpt()
	opt.MinInterval = time.Hour
	_, c := run(t, opt, curves, order, "none", []phase{load(2*W, 1), load(3*W, 32)})
	if want := "min_interval 1h: the last switch was at 2026-12-01T00:00:10Z"; c.State().Held != want {
		t.Errorf("held %q, want %q", c.State().Held, want)
	}
	opt = fastOpt()
	opt.MaxSwitchesPerDay = 1
	_, c = run(t, opt, curves, order, "none", []phase{load(2*W, 1), load(3*W, 32)})
	if want := "max_switches_per_day 1: the oldest of them was at 2026-12-01T00:00:10Z"; c.State().Held != want {
		t.Errorf("held %q, want %q", c.State().Held, want)
	}
	// Nothing agreed, nothing held.
	_, c = run(t, opt, curves, order, "none", []phase{load(2*W, 1), load(W, 2.4)})
	if st := c.State(); st.Held != "" || st.Agreeing != "" {
		t.Errorf("held %q, agreeing %q", st.Held, st.Agreeing)
	}
}

// BenchmarkObserve is one disk's sample: what the daemon pays per
// adaptive disk per sample interval.
func BenchmarkObserve(b *testing.B) { benchmarkObserve(b, false) }

// BenchmarkObserveState is a sample and the state read after it: what
// the daemon does for each adaptive disk every sample interval.
func BenchmarkObserveState(b *testing.B) { benchmarkObserve(b, true) }

// benchmarkObserve feeds a 10m/5s controller a load that moves across
// the crossing (every sample has a verdict; no window agrees).
func benchmarkObserve(b *testing.B, state bool) {
	curves, order := crossing()
	opt := adaptopt.Default()
	c, err := NewController(opt, curves, order, "none")
	if err != nil {
		b.Fatal(err)
	}
	depths := []float64{1.5, 1.5, 6, 6, 6, 1.8}
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(opt.Sample)
		c.Observe(Sample{At: now, Scheduler: "none", BusyDepth: depths[i%len(depths)], Busy: 0.9, IOPS: 900, Latency: time.Millisecond})
		if state && c.State().Depth == 0 {
			b.Fatal("no operating point")
		}
	}
}

func TestSampleOf(t *testing.T) {
	t.Parallel()
	p := observe.Point{At: t0, Elapsed: time.Second, ReadIOPS: 300, WriteIOPS: 100, LatencyUs: 250, Busy: 0.5, QueueDepth: 4, BusyDepth: 8}
	want := Sample{At: t0, Scheduler: "none", BusyDepth: 8, Busy: 0.5, IOPS: 400, Latency: 250 * time.Microsecond}
	if got := SampleOf(p, "none"); got != want {
		t.Errorf("SampleOf(%+v) = %+v, want %+v", p, got, want)
	}
}

// The guard waits for load at a similar depth; without any for a day it
// closes without a verdict.
func TestGuardGivesUpAfterADay(t *testing.T) {
	t.Parallel()
	const W = 10 * time.Second
	curves, order := crossing()
	_, c := run(t, fastOpt(), curves, order, "mq-deadline", []phase{load(W, 32), load(W, 12)})
	if !c.State().Guarding {
		t.Fatalf("no guard a window after the switch: %+v", c.State())
	}
	_, c = run(t, fastOpt(), curves, order, "mq-deadline", []phase{load(W, 32), load(24*time.Hour+W, 12)})
	if st := c.State(); st.Guarding || st.Scheduler != "none" {
		t.Errorf("a day without a similar depth: %+v", st)
	}
}

// Samples of nonsense (NaN or infinite figures, from counters that went
// backwards) are idle: no verdict, no switch, a finite state.
func TestControllerNonsenseSamples(t *testing.T) {
	t.Parallel()
	curves, order := crossing()
	c, err := NewController(fastOpt(), curves, order, "none")
	if err != nil {
		t.Fatal(err)
	}
	nan, inf := math.NaN(), math.Inf(1)
	bad := []Sample{
		{BusyDepth: nan, Busy: 1, IOPS: 1000},
		{BusyDepth: 1, Busy: nan, IOPS: 1000},
		{BusyDepth: 1, Busy: 1, IOPS: nan},
		{BusyDepth: inf, Busy: 1, IOPS: 1000},
		{BusyDepth: 1, Busy: inf, IOPS: 1000},
		{BusyDepth: 1, Busy: 1, IOPS: inf},
		{BusyDepth: -1, Busy: 1, IOPS: 1000},
	}
	for i := 1; i <= 100; i++ {
		s := bad[i%len(bad)]
		s.At, s.Scheduler = t0.Add(time.Duration(i)*time.Second), "none"
		if d := c.Observe(s); d.Switch {
			t.Fatalf("switch on %+v", s)
		}
	}
	if st := c.State(); st.Depth != 0 || st.Favoured != "" || st.Agreeing != "" || math.IsNaN(st.Busy) || st.Busy > 1 {
		t.Errorf("state after nonsense: %+v", st)
	}
}

// The guard's latency before a switch is the load's near the operating
// point only: a third of the samples at depth 4, each 20 ms, leave the
// depth-32 latency (1 ms before, 1.4 ms after) to compare.
func TestGuardComparesLikeWithLike(t *testing.T) {
	t.Parallel()
	curves, order := crossing()
	c, err := NewController(fastOpt(), curves, order, "mq-deadline")
	if err != nil {
		t.Fatal(err)
	}
	sched := "mq-deadline"
	var seen []string
	for i := 1; i <= 60; i++ {
		depth, lat := 32.0, time.Millisecond
		if i%3 == 0 {
			depth, lat = 4, 20*time.Millisecond
		} else if sched == "none" {
			lat = 1400 * time.Microsecond
		}
		d := c.Observe(Sample{At: t0.Add(time.Duration(i) * time.Second), Scheduler: sched, BusyDepth: depth, Busy: 0.9, IOPS: 900, Latency: lat})
		if d.Switch {
			seen = append(seen, fmt.Sprintf("%ds %s->%s revert=%v: %s", i, d.From, d.To, d.Revert, d.Reason))
			sched = d.To
		}
	}
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "10s mq-deadline->none revert=false") ||
		!strings.Contains(seen[1], "revert=true: adapt: guard: latency per I/O at busy depth 32 rose 40% (1000us to 1400us)") {
		t.Errorf("switches:\n%s", strings.Join(seen, "\n"))
	}
}

// A controller given another's History (a restart, new options) counts
// its switches, its last switch and its pin as its own; the window does
// not carry over.
func TestControllerRestoresHistory(t *testing.T) {
	t.Parallel()
	const W = 10 * time.Second
	curves, order := crossing()
	opt := fastOpt()
	opt.MaxSwitchesPerDay = 2
	seen, first := run(t, opt, curves, order, "none", []phase{load(2*W, 1), load(2*W, 32)})
	if len(seen) != 2 {
		t.Fatalf("%d switches, want 2", len(seen))
	}
	h := first.History()
	if len(h.Switches) != 2 || h.LastTo != "none" || h.LastFrom != "mq-deadline" {
		t.Fatalf("history %+v", h)
	}

	// A new controller (a margin edited) an hour later: the budget is
	// spent, whatever the load.
	opt.Margin = 0.06
	c, err := NewController(opt, curves, order, "none")
	if err != nil {
		t.Fatal(err)
	}
	c.Restore(h)
	now := t0.Add(time.Hour)
	for i := range 30 {
		now = now.Add(opt.Sample)
		if d := c.Observe(Sample{At: now, Scheduler: "none", BusyDepth: 1, Busy: 0.9, IOPS: 900, Latency: 100 * time.Microsecond}); d.Switch {
			t.Fatalf("sample %d: switched past the day's budget: %+v", i, d)
		}
	}
	if st := c.State(); !strings.HasPrefix(st.Held, "max_switches_per_day 2") || st.SwitchesToday != 2 || st.LastTo != "none" {
		t.Errorf("state %+v", st)
	}

	// min_interval and the pin come along too.
	opt = fastOpt()
	opt.MinInterval = 2 * time.Hour
	c, _ = NewController(opt, curves, order, "none")
	c.Restore(History{Switches: []time.Time{t0}, LastSwitch: t0, LastTo: "none"})
	now = t0.Add(time.Hour)
	for range 30 {
		now = now.Add(opt.Sample)
		c.Observe(Sample{At: now, Scheduler: "none", BusyDepth: 1, Busy: 0.9, IOPS: 900, Latency: 100 * time.Microsecond})
	}
	if st := c.State(); !strings.HasPrefix(st.Held, "min_interval 2h") {
		t.Errorf("held %q, want min_interval's", st.Held)
	}
	c, _ = NewController(fastOpt(), curves, order, "none")
	c.Restore(History{PinnedUntil: t0.Add(24 * time.Hour)})
	now = t0.Add(time.Hour)
	for range 30 {
		now = now.Add(opt.Sample)
		c.Observe(Sample{At: now, Scheduler: "none", BusyDepth: 1, Busy: 0.9, IOPS: 900, Latency: 100 * time.Microsecond})
	}
	if st := c.State(); !strings.HasPrefix(st.Held, "pinned by the guard rail") {
		t.Errorf("held %q, want the pin's", st.Held)
	}
	if !(History{}).Empty(now) || (History{PinnedUntil: now.Add(time.Second)}).Empty(now) {
		t.Error("Empty")
	}
}
