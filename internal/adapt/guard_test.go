package adapt

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// disk is a closed-loop load on an emulated cloud disk for the guard's
// tests: depth(i) reads in flight at sample i, served at iops(i, sched)
// I/Os a second; latency follows (Little's law: depth / IOPS).
type disk struct {
	depth func(i int) float64
	iops  func(i int, sched string) float64
	// spanning, when set, is the latency of the sample that spans a
	// switch (the queue's freeze while the switch is written).
	spanning time.Duration
}

type guardRun struct {
	seen []switchSeen // switches, at their time since t0
	// unpinned are the samples (since t0) whose decision lifted the pin.
	unpinned []time.Duration
	c        *Controller
	reasons  []string
}

// runDisk feeds n samples of dk, one a second, to a controller on the
// crossing curves, carrying out each switch.
func runDisk(t *testing.T, start string, n int, dk disk) guardRun {
	t.Helper()
	curves, order := crossing()
	c, err := NewController(fastOpt(), curves, order, start)
	if err != nil {
		t.Fatal(err)
	}
	r := guardRun{c: c}
	sched, spanning := start, false
	for i := 1; i <= n; i++ {
		at := time.Duration(i) * time.Second
		depth, iops := dk.depth(i), dk.iops(i, sched)
		lat := time.Duration(depth / iops * float64(time.Second))
		if spanning && dk.spanning > 0 {
			lat = dk.spanning
		}
		d := c.Observe(Sample{At: t0.Add(at), Scheduler: sched, BusyDepth: depth, Busy: 1, IOPS: iops, Latency: lat})
		spanning = d.Switch
		if d.Switch {
			r.seen = append(r.seen, switchSeen{at, d})
			r.reasons = append(r.reasons, fmt.Sprintf("%s %s->%s revert=%v: %s", at, d.From, d.To, d.Revert, d.Reason))
			sched = d.To
		}
		if d.Unpin {
			r.unpinned = append(r.unpinned, at)
			r.reasons = append(r.reasons, fmt.Sprintf("%s unpin: %s", at, d.Reason))
		}
	}
	return r
}

// credits is a burst-credit disk whose IOPS fall from 3000 (on credits)
// to a baseline of 300 from sample cliff on, whatever the scheduler.
func credits(cliff int) func(int, string) float64 {
	return func(i int, _ string) float64 {
		if i >= cliff {
			return 300
		}
		return 3000
	}
}

func at32(int) float64 { return 32 }

// The switch to none (depth 32, from mq-deadline) is at 10s in each of
// these loads: a window agreeing from the first sample.
const switchAt = 10

func (r guardRun) want(t *testing.T, switches int, reverts int) {
	t.Helper()
	n := 0
	for _, s := range r.seen {
		if s.d.Revert {
			n++
		}
	}
	if len(r.seen) != switches || n != reverts {
		t.Errorf("%d switches (%d reverts), want %d (%d):\n%s", len(r.seen), n, switches, reverts, strings.Join(r.reasons, "\n"))
	}
}

// Credits run out three samples after the switch: latency per I/O at
// depth 32 goes up tenfold, but the first sample after the one spanning
// the switch was as before: not the switch's doing, no revert, no pin.
func TestGuardCreditCliffAfterTheSwitch(t *testing.T) {
	t.Parallel()
	r := runDisk(t, "mq-deadline", 60, disk{depth: at32, iops: credits(switchAt + 3)})
	r.want(t, 1, 0)
	st := r.c.State()
	if st.Scheduler != "none" || !st.PinnedUntil.IsZero() || st.Guarding {
		t.Errorf("state %+v", st)
	}
	if want := "after the switch to none, but the first sample after it was at 10667us: the rise came later"; !strings.Contains(st.GuardVerdict, want) {
		t.Errorf("verdict %q, want it to say %q", st.GuardVerdict, want)
	}
}

// Credits ran out two samples before the switch: the rise was under way
// when the switch came, and the guard does not compare.
func TestGuardCreditCliffBeforeTheSwitch(t *testing.T) {
	t.Parallel()
	r := runDisk(t, "mq-deadline", 60, disk{depth: at32, iops: credits(switchAt - 1)})
	r.want(t, 1, 0)
	st := r.c.State()
	if st.Scheduler != "none" || st.Guarding || !strings.Contains(st.GuardVerdict, "was already rising before the switch to none") {
		t.Errorf("state %+v", st)
	}
}

// Credits run out with the switch, under a load whose depth moves (24 and
// 34 in turn): after the switch the disk gives 300 IOPS at both depths, a
// rate ceiling, and latency grows with depth. Not the scheduler's doing:
// no revert.
func TestGuardCreditCliffWithTheSwitch(t *testing.T) {
	t.Parallel()
	moving := func(i int) float64 { return []float64{24, 34}[i%2] }
	r := runDisk(t, "mq-deadline", 60, disk{depth: moving, iops: credits(switchAt + 1)})
	r.want(t, 1, 0)
	st := r.c.State()
	if !strings.Contains(st.GuardVerdict, "at a rate ceiling (IOPS flat, slope 0.00, over busy depths 24 to 34): throughput-bound") {
		t.Errorf("verdict %q", st.GuardVerdict)
	}
}

// Credits run out with the switch under a load at one depth: nothing
// tells the cliff from the switch, so the guard switches back and pins;
// its review finds latency as bad back on mq-deadline, lifts the pin
// (Unpin, State.GuardCleared, the History), and the disk goes back to the
// curve's choice.
func TestGuardCreditCliffWithTheSwitchReviewed(t *testing.T) {
	t.Parallel()
	r := runDisk(t, "mq-deadline", 60, disk{depth: at32, iops: credits(switchAt + 1)})
	r.want(t, 3, 1)
	if len(r.seen) < 2 || !r.seen[1].d.Revert {
		t.Fatalf("switches:\n%s", strings.Join(r.reasons, "\n"))
	}
	revert := r.seen[1].at
	if len(r.unpinned) != 1 || r.unpinned[0] < revert+10*time.Second || r.unpinned[0] > revert+11*time.Second {
		t.Fatalf("unpinned at %v, want one a window after the revert at %s:\n%s", r.unpinned, revert, strings.Join(r.reasons, "\n"))
	}
	if r.seen[2].d.To != "none" || r.seen[2].at <= r.unpinned[0] {
		t.Errorf("after the review: %s", strings.Join(r.reasons, "\n"))
	}
	h := r.c.History()
	if !h.PinnedUntil.IsZero() || !h.GuardCleared.Equal(t0.Add(r.unpinned[0])) ||
		!strings.Contains(h.GuardClearedReason, "stayed at 106667us back on mq-deadline (106667us on none): the switch back did not help") {
		t.Errorf("history %+v", h)
	}
	if st := r.c.State(); !st.GuardCleared.Equal(h.GuardCleared) || st.GuardClearedReason != h.GuardClearedReason {
		t.Errorf("state %+v", st)
	}
	// The next controller of the disk keeps it.
	curves, order := crossing()
	c, _ := NewController(fastOpt(), curves, order, "none")
	c.Restore(h)
	if st := c.State(); !st.GuardCleared.Equal(h.GuardCleared) || !st.PinnedUntil.IsZero() {
		t.Errorf("restored: %+v", st)
	}
}

// The sample that spans the switch (its reads waited for the queue's
// freeze: five times the latency) is left out; the rest is as before.
func TestGuardLeavesOutTheSwitchSample(t *testing.T) {
	t.Parallel()
	r := runDisk(t, "mq-deadline", 40, disk{depth: at32, iops: credits(1000), spanning: 5 * 32 * time.Second / 3000})
	r.want(t, 1, 0)
	if v := r.c.State().GuardVerdict; !strings.HasPrefix(v, "guard: kept the switch to none: latency per I/O at busy depth 32 10667us before, 10667us after") {
		t.Errorf("verdict %q", v)
	}
}

// A true regression is still caught, under a load whose depth moves (the
// disk has headroom: IOPS grow with depth) and at one depth: none serves
// 40% fewer IOPS from its first I/O; the guard switches back and pins,
// and its review, with latency as before back on mq-deadline, keeps the
// pin.
func TestGuardStillCatchesARegression(t *testing.T) {
	t.Parallel()
	for name, depth := range map[string]func(int) float64{
		"moving":    func(i int) float64 { return []float64{24, 34}[i%2] },
		"one depth": at32,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dk := disk{depth: depth, iops: func(i int, sched string) float64 {
				iops := 100 * depth(i)
				if sched == "none" {
					iops *= 0.6
				}
				return iops
			}}
			r := runDisk(t, "mq-deadline", 60, dk)
			r.want(t, 2, 1)
			st := r.c.State()
			if st.Scheduler != "mq-deadline" || !st.PinnedUntil.After(t0.Add(24*time.Hour)) || len(r.unpinned) != 0 ||
				!st.GuardCleared.IsZero() || st.Guarding {
				t.Errorf("state %+v, unpinned %v", st, r.unpinned)
			}
			if !strings.Contains(st.LastReason, "rose 67% (10000us to 16667us) after the switch to none; back to mq-deadline") {
				t.Errorf("reason %q", st.LastReason)
			}
		})
	}
}

// One slow sample just before the switch (a stall of the machine) is no
// rise under way: the guard compares, and catches a regression.
func TestGuardOneSlowSampleIsNoRiseUnderWay(t *testing.T) {
	t.Parallel()
	dk := disk{depth: at32, iops: func(i int, sched string) float64 {
		switch {
		case i == switchAt:
			return 320 // a tenth: latency tenfold, in the sample of the switch
		case sched == "none":
			return 1800
		}
		return 3200
	}}
	r := runDisk(t, "mq-deadline", 40, dk)
	r.want(t, 2, 1)
	if st := r.c.State(); st.Scheduler != "mq-deadline" || st.GuardVerdict != "" || !strings.Contains(st.LastReason, "after the switch to none; back to mq-deadline") {
		t.Errorf("state %+v", st)
	}
}
