package adapt

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/probe"
)

// Sample is a disk's operating point over one sample interval, ending At:
// what the daemon reads from the disk's stat deltas.
type Sample struct {
	// At is when the interval ended; the controller's only clock.
	At time.Time
	// Scheduler is the disk's scheduler over the interval.
	Scheduler string
	// BusyDepth is the mean number of requests in flight while the disk
	// was busy (mean in flight / busy fraction): the axis the curves are
	// read on (probe.CurvePoint.ObservedDepth).
	BusyDepth float64
	// Busy is the fraction of the interval the disk had requests in
	// flight (io_ticks), 0..1.
	Busy float64
	// IOPS are the I/Os completed a second over the interval.
	IOPS float64
	// Latency is the mean time an I/O spent in the disk (the time in
	// queue over the interval divided by the I/Os completed).
	Latency time.Duration
	// Switching is set by an owner that knows a switch the controller
	// asked for was not yet written, or was written during the interval:
	// the guard rail leaves the sample out (its I/Os ran under both
	// schedulers, and waited for the queue's freeze).
	Switching bool
}

// IdleBusy is the busy fraction below which a sample is idle: its depth
// is noise (a few reads of a monitoring agent), so it never favours a
// candidate and breaks any agreement.
const IdleBusy = 0.01

// SampleOf is the Sample of an observed operating point, for a disk whose
// scheduler over the point's interval was scheduler.
func SampleOf(p observe.Point, scheduler string) Sample {
	return Sample{At: p.At, Scheduler: scheduler, BusyDepth: p.BusyDepth, Busy: p.Busy, IOPS: p.IOPS(),
		Latency: time.Duration(p.LatencyUs * float64(time.Microsecond))}
}

// point is s as the window counts it, over the dur before s.At. An idle
// sample counts its busy time (for State.Busy) and nothing else: no depth
// (so the operating point is the busy samples') and no I/Os (so the guard
// reads none of it).
func (s Sample) point(dur time.Duration) observe.Point {
	p := observe.Point{At: s.At, Elapsed: dur}
	if s.idle() {
		if s.Busy >= 0 && s.Busy <= 1 { // a nonsense figure must not reach State.Busy
			p.Busy = s.Busy
		}
		return p
	}
	p.ReadIOPS = s.IOPS
	p.LatencyUs = float64(s.Latency) / float64(time.Microsecond)
	p.Busy = min(s.Busy, 1)
	p.QueueDepth = p.Busy * s.BusyDepth
	p.BusyDepth = s.BusyDepth
	return p
}

// idle reports whether s says nothing about the workload's depth.
func (s Sample) idle() bool {
	// Written so that NaN (a counter that went backwards, divided by a
	// zero interval) is idle too.
	return !(s.Busy >= IdleBusy) || !(s.IOPS > 0) || !(s.BusyDepth > 0) ||
		math.IsInf(s.Busy, 0) || math.IsInf(s.IOPS, 0) || math.IsInf(s.BusyDepth, 0)
}

// GuardFactor is how far apart two operating points may be and still be
// compared by the guard rail: busy depths within a factor of 1.5. The
// window keeps latency by depth bins a factor of 1.41 wide and the guard
// takes them whole (observe.Near), so it compares every depth within 1.5x
// and none further than 2.1x, the same on both sides of the switch.
const GuardFactor = 1.5

// PinFor is how long the guard rail pins a disk it switched back.
const PinFor = 24 * time.Hour

// day is the span max_switches_per_day counts over.
const day = 24 * time.Hour

// Decision is what the controller says after a sample.
type Decision struct {
	// Switch is true when the disk's scheduler should become To now.
	Switch bool
	// From is the scheduler the disk had; To the one to set.
	From, To string
	// Revert is true when the guard rail switches back (the disk is then
	// pinned to To until PinnedUntil).
	Revert      bool
	PinnedUntil time.Time
	// Unpin is true, with no switch, when the guard rail's review finds
	// that its switch back was wrong (latency stayed as bad under the
	// scheduler it went back to): the pin is lifted, Reason says why.
	Unpin bool
	// Reason is the switch's provenance, for the pass, the log and
	// explain: `adapt: busy depth 23 over 10m; curve: none 1.52x
	// mq-deadline at depth 23`.
	Reason string
}

// State is what a controller knows of its disk, for status, explain and
// metrics.
type State struct {
	// Scheduler is the disk's scheduler as the controller last saw it or
	// set it.
	Scheduler string
	// Depth is the window's operating point: the busy-time-weighted
	// median busy depth of its busy samples (the mean depth of the
	// window's depth bin the median falls in, observe.Window.Quantile);
	// 0 when the window was idle.
	Depth float64
	// Busy is the window's mean busy fraction.
	Busy float64
	// Span is how much of the window the samples cover: up to the
	// window, from which a slot of it (an observe.Slots'th) at a time
	// leaves.
	Span time.Duration
	// Favoured is the candidate the curves favour at Depth and Gain by
	// how much over the current scheduler; "" without a verdict.
	Favoured string
	Gain     float64
	// Agreeing is the candidate that every sample since AgreeingSince
	// favoured by more than the margin, "" when none.
	Agreeing      string
	AgreeingSince time.Time
	// LastSwitch, LastFrom, LastTo and LastReason are the last switch;
	// LastSwitch is zero before any.
	LastSwitch       time.Time
	LastFrom, LastTo string
	LastReason       string
	// PinnedUntil is when a disk the guard rail switched back may switch
	// again; zero or past when it is not pinned.
	PinnedUntil time.Time
	// SwitchesToday are the switches in the 24 hours up to the last
	// sample.
	SwitchesToday int
	// Guarding is true while the guard rail waits to compare a switch's
	// latency with the one before it, or to review its switch back.
	Guarding bool
	// GuardVerdict is the last guard comparison that kept a switch:
	// better or within the margin, or worse by a rise that was not the
	// switch's doing (it began before the switch, or after it, or the
	// disk was held at a rate ceiling); "" when none did. A revert's
	// verdict is its LastReason.
	GuardVerdict string
	// GuardCleared is when the guard rail's review lifted the pin of its
	// last switch back (zero when it did not), GuardClearedReason why.
	GuardCleared       time.Time
	GuardClearedReason string
	// Held says why a switch the window agreed on at the last sample
	// waits: "min_interval 1h: the last switch was at ...", "pinned by
	// the guard rail until ...", "max_switches_per_day 6: ..."; "" when
	// none waits.
	Held string
}

// Controller decides one disk's scheduler by the depth its workload runs
// at. It does no I/O and reads no clock: the daemon feeds it a Sample each
// sample interval (Observe) and carries out the switches it returns. Its
// memory is fixed whatever the window and the sample rate: an
// observe.Window (the window's operating point and the latency at each
// depth, in slots an observe.Slots'th of the window long), the curves,
// and the last max_switches_per_day switch times.
//
// The rules it keeps: a switch needs the same candidate favoured by more
// than the margin on every sample of a whole window and at the window's
// operating point; an idle sample breaks the agreement; no two switches
// closer than MinInterval, nor more than MaxSwitchesPerDay in any 24
// hours; with the guard on, latency per I/O at a similar depth worse by
// more than the margin after a switch, by the switch's doing, switches
// back and pins the disk for PinFor (guard.go).
type Controller struct {
	opt        adaptopt.Options
	candidates candidates

	current string
	last    time.Time // the last sample's At; zero before the first
	window  observe.Window

	agree      string    // the candidate every sample since agreeFrom favoured
	agreeFrom  time.Time // the start of the first agreeing sample's interval
	switches   []time.Time
	lastSwitch struct {
		at       time.Time
		from, to string
		reason   string
	}
	pinnedUntil time.Time
	guard       *guard
	review      *review
	recent      recentSamples // the last busy samples, for the guard's onset
	verdict     string        // State.GuardVerdict
	cleared     struct {
		at     time.Time
		reason string
	}
	held held // why the last sample's agreed switch waits
}

// held is what keeps an agreed switch waiting, written out by State (not
// by every sample that waits).
type held struct {
	by    holdKind
	since time.Time // the pin's end, the last switch, or the oldest of the day's
}

type holdKind int

const (
	notHeld holdKind = iota
	heldByPin
	heldByMinInterval
	heldByMaxSwitches
)

// NewController starts a controller for a disk whose scheduler is now
// current, judged by opt (valid: adaptopt.Options.Problems is empty) on
// the candidates' curves (Curves of the disk's probe record).
func NewController(opt adaptopt.Options, curves map[string][]probe.CurvePoint, order []string, current string) (*Controller, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{opt: opt, current: current, window: *observe.NewWindow(opt.Window)}
	c.switches = make([]time.Time, 0, opt.MaxSwitchesPerDay+1)
	c.SetCurves(curves, order)
	return c, nil
}

// SetCurves replaces the curves (a new probe result): agreement so far
// was on the old ones, so it starts again; the window stays (it is the
// workload's, not the curves').
func (c *Controller) SetCurves(curves map[string][]probe.CurvePoint, order []string) {
	c.candidates = candidatesOf(curves, order)
	c.agree = ""
}

// Reset forgets the window and the agreement, keeping the switch history,
// the pin and the guard's "before": for a gap in the samples (a probe or
// another writer held the disk), after which the next sample's interval
// would span the gap.
func (c *Controller) Reset() {
	c.window.Reset()
	c.agree = ""
	c.last = time.Time{}
	c.recent = recentSamples{}
}

// Observe takes the sample ending at s.At and says whether to switch. A
// switch returned is taken as made: the next sample should show To as
// its Scheduler; one that shows another scheduler (the write failed, or
// someone else changed it) starts the agreement again and drops the
// guard. A sample not later than the previous one is ignored.
func (c *Controller) Observe(s Sample) Decision {
	if !c.last.IsZero() && !s.At.After(c.last) {
		return Decision{}
	}
	dur := c.opt.Sample
	if !c.last.IsZero() {
		dur = s.At.Sub(c.last)
	}
	from := s.At.Add(-dur)
	c.last = s.At
	c.held = held{}
	if s.Scheduler != c.current {
		c.current = s.Scheduler
		c.agree = ""
		c.guard = nil
		c.review = nil
	}
	c.window.Add(s.point(dur))
	c.recent.add(s, dur)
	c.pruneSwitches(s.At)

	if d, ok := c.judgeGuard(s, dur); ok {
		return d
	}
	if d, ok := c.judgeReview(s, dur); ok {
		return d
	}

	// This sample's verdict: does it favour a candidate by more than the
	// margin?
	fav := ""
	if !s.idle() {
		if v, ok := c.candidates.favour(s.BusyDepth, c.current); ok && v.Favoured != c.current && v.Gain() > c.opt.Margin {
			fav = v.Favoured
		}
	}
	switch {
	case fav == "":
		c.agree = ""
		return Decision{}
	case fav != c.agree:
		c.agree, c.agreeFrom = fav, from
	}
	if s.At.Sub(c.agreeFrom) < c.opt.Window {
		return Decision{}
	}
	// A whole window agrees sample by sample; its operating point must
	// agree too (it does for two candidates that cross once; the check
	// keeps the provenance true for any curves). The observe.Window
	// holds no sample older than the window, so every one it holds
	// agreed.
	depth := c.window.Quantile(s.At, 0.5)
	if depth <= 0 {
		return Decision{}
	}
	v, ok := c.candidates.favour(depth, c.current)
	if !ok || v.Favoured != c.agree || v.Gain() <= c.opt.Margin {
		return Decision{}
	}
	if c.held = c.blocked(s.At); c.held.by != notHeld {
		return Decision{}
	}
	reason := fmt.Sprintf("adapt: busy depth %s over %s; curve: %s %.2fx %s at %s",
		fmtDepth(depth), fmtDuration(c.opt.Window), v.Favoured, v.FavouredIOPS/v.OverIOPS, v.Over, v.Where())
	d := c.switchTo(s.At, v.Favoured, reason)
	if c.opt.Guard {
		c.openGuard(s.At, d.From, d.To, depth)
	}
	return d
}

// blocked says what a switch at now would break: the pin, MinInterval or
// MaxSwitchesPerDay; notHeld when nothing.
func (c *Controller) blocked(now time.Time) held {
	switch {
	case now.Before(c.pinnedUntil):
		return held{heldByPin, c.pinnedUntil}
	case !c.lastSwitch.at.IsZero() && now.Sub(c.lastSwitch.at) < c.opt.MinInterval:
		return held{heldByMinInterval, c.lastSwitch.at}
	case len(c.switches) >= c.opt.MaxSwitchesPerDay:
		return held{heldByMaxSwitches, c.switches[0]}
	}
	return held{}
}

// String is State.Held's text.
func (h held) String(opt adaptopt.Options) string {
	if h.by == notHeld {
		return ""
	}
	at := h.since.UTC().Format(time.RFC3339)
	switch h.by {
	case heldByPin:
		return "pinned by the guard rail until " + at
	case heldByMinInterval:
		return fmt.Sprintf("min_interval %s: the last switch was at %s", fmtDuration(opt.MinInterval), at)
	case heldByMaxSwitches:
		return fmt.Sprintf("max_switches_per_day %d: the oldest of them was at %s", opt.MaxSwitchesPerDay, at)
	}
	return ""
}

func (c *Controller) switchTo(now time.Time, to, reason string) Decision {
	d := Decision{Switch: true, From: c.current, To: to, Reason: reason}
	c.current = to
	c.agree = ""
	c.guard = nil
	c.review = nil
	c.switches = append(c.switches, now)
	if n := len(c.switches) - c.opt.MaxSwitchesPerDay; n > 0 {
		// A guard's switch back may go past the budget; only the last
		// MaxSwitchesPerDay times are needed to enforce it.
		c.switches = slices.Delete(c.switches, 0, n)
	}
	c.lastSwitch.at, c.lastSwitch.from, c.lastSwitch.to, c.lastSwitch.reason = now, d.From, to, reason
	return d
}

func (c *Controller) pruneSwitches(now time.Time) {
	i := 0
	for i < len(c.switches) && now.Sub(c.switches[i]) >= day {
		i++
	}
	c.switches = slices.Delete(c.switches, 0, i)
}

// State returns what the controller knows as of its last sample.
func (c *Controller) State() State {
	st := State{
		Scheduler:     c.current,
		Agreeing:      c.agree,
		LastSwitch:    c.lastSwitch.at,
		LastFrom:      c.lastSwitch.from,
		LastTo:        c.lastSwitch.to,
		LastReason:    c.lastSwitch.reason,
		PinnedUntil:   c.pinnedUntil,
		SwitchesToday: len(c.switches),
		Guarding:      c.guard != nil || c.review != nil,
		GuardVerdict:  c.verdict,
		Held:          c.held.String(c.opt),

		GuardCleared:       c.cleared.at,
		GuardClearedReason: c.cleared.reason,
	}
	if c.agree != "" {
		st.AgreeingSince = c.agreeFrom
	}
	sum := c.window.Summary(c.last)
	st.Span, st.Busy = sum.Covered, sum.Busy
	if sum.BusyDepth > 0 {
		st.Depth = sum.BusyDepth
		if v, ok := c.candidates.favour(sum.BusyDepth, c.current); ok {
			st.Favoured, st.Gain = v.Favoured, v.Gain()
		}
	}
	return st
}

// fmtDepth writes a depth as people say it: "23", "1.5".
func fmtDepth(d float64) string {
	if d >= 10 {
		return strconv.FormatFloat(math.Round(d), 'f', 0, 64)
	}
	return strconv.FormatFloat(math.Round(d*10)/10, 'f', -1, 64)
}

// fmtDuration writes a policy duration without its zero units: "10m",
// "1h30m", "2s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtLatency writes a latency in whole microseconds, in ASCII ("us"):
// the reason goes to the log, the state file and metrics consumers.
func fmtLatency(ns float64) string {
	return strconv.FormatFloat(ns/1e3, 'f', 0, 64) + "us"
}

// History is what the limits need of a disk's past switches: the times of
// the switches in the last 24 hours (MaxSwitchesPerDay), the last switch
// (MinInterval; its To is the disk's adaptive choice) and the guard
// rail's pin. A controller's owner keeps it beyond the controller (a
// restart, new options or curves) and gives it to the next one, so that
// the limits hold over any 24 hours, not over one controller's life.
type History struct {
	// Switches are the switch times, oldest first.
	Switches []time.Time
	// LastSwitch is zero before any switch.
	LastSwitch       time.Time
	LastFrom, LastTo string
	LastReason       string
	PinnedUntil      time.Time
	// GuardCleared is when the guard rail's review lifted the pin of its
	// switch back, GuardClearedReason why; zero when it did not.
	GuardCleared       time.Time
	GuardClearedReason string
}

// MaxHistory bounds the switch times a History keeps: the most any
// options may count (adaptopt.MaxSwitchesPerDay) and one more, for a
// guard rail's switch back past the budget.
const MaxHistory = adaptopt.MaxSwitchesPerDay + 1

// Empty reports whether h holds nothing a limit needs as of now: no
// switch within 24 hours (nor one in the future: a clock set back), no
// pin still in force.
func (h History) Empty(now time.Time) bool {
	for _, s := range h.Switches {
		if now.Sub(s) < day {
			return false
		}
	}
	return now.Sub(h.LastSwitch) >= day && !now.Before(h.PinnedUntil) && now.Sub(h.GuardCleared) >= day
}

// History returns the controller's history, for its owner to keep.
func (c *Controller) History() History {
	return History{
		Switches:   slices.Clone(c.switches),
		LastSwitch: c.lastSwitch.at, LastFrom: c.lastSwitch.from, LastTo: c.lastSwitch.to, LastReason: c.lastSwitch.reason,
		PinnedUntil:  c.pinnedUntil,
		GuardCleared: c.cleared.at, GuardClearedReason: c.cleared.reason,
	}
}

// Restore takes h (another controller's of the same disk, kept by the
// owner) as this controller's own past: its switches count against
// MaxSwitchesPerDay, its last switch against MinInterval, its pin holds.
// Of its switch times only the newest this controller's budget needs are
// kept (more would never change a verdict). The window, the agreement
// and an open guard are not part of a History: they start again.
func (c *Controller) Restore(h History) {
	sw := slices.Clone(h.Switches)
	slices.SortFunc(sw, func(a, b time.Time) int { return a.Compare(b) })
	if n := len(sw) - c.opt.MaxSwitchesPerDay; n > 0 {
		sw = sw[n:]
	}
	c.switches = append(c.switches[:0], sw...)
	c.lastSwitch.at, c.lastSwitch.from, c.lastSwitch.to, c.lastSwitch.reason = h.LastSwitch, h.LastFrom, h.LastTo, h.LastReason
	c.pinnedUntil = h.PinnedUntil
	c.cleared.at, c.cleared.reason = h.GuardCleared, h.GuardClearedReason
}
