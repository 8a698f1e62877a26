package probe

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

// Options say how to probe. A zero field means its default (see
// DefaultOptions), except Margin, where 0 is a margin of 0%: start from
// DefaultOptions. The limits are policy's, shared with [rule.probe].
type Options struct {
	// Candidates are the schedulers to compare (at least two the disk
	// offers). The incumbent is the disk's current scheduler when it is
	// one of them, else the first.
	Candidates []string
	// Duration is each measurement's length.
	Duration time.Duration
	Rounds   int
	// Depth is the deep-queue measurement's reads in flight.
	Depth     int
	BlockSize int
	// Engine is EngineIOUring, EnginePsync, or "" for io_uring where the
	// kernel allows it.
	Engine string
	Choose string
	// Margin is a fraction: 0.05 for 5%.
	Margin float64
	// Apply keeps the winner instead of restoring the original scheduler.
	Apply bool
	// Force probes a disk that others are using.
	Force bool
}

// DefaultOptions are what `iosched probe` and [rule.probe] use for what
// they do not set.
func DefaultOptions() Options {
	p := policy.DefaultProbe()
	return Options{
		Candidates: p.Candidates, Duration: p.Duration, Rounds: p.Rounds, Depth: p.Depth,
		BlockSize: p.BlockSize, Engine: p.Engine, Choose: p.Choose, Margin: p.Margin,
	}
}

// FromPolicy turns a rule's [rule.probe] into options.
func FromPolicy(p *policy.Probe) Options {
	return Options{
		Candidates: slices.Clone(p.Candidates), Duration: p.Duration, Rounds: p.Rounds, Depth: p.Depth,
		BlockSize: p.BlockSize, Engine: p.Engine, Choose: p.Choose, Margin: p.Margin,
	}
}

func (o *Options) fill() {
	d := DefaultOptions()
	if len(o.Candidates) == 0 {
		o.Candidates = d.Candidates
	}
	if o.Duration == 0 {
		o.Duration = d.Duration
	}
	if o.Rounds == 0 {
		o.Rounds = d.Rounds
	}
	if o.Depth == 0 {
		o.Depth = d.Depth
	}
	if o.BlockSize == 0 {
		o.BlockSize = d.BlockSize
	}
	if o.Choose == "" {
		o.Choose = d.Choose
	}
}

// Validate checks the options against the limits [rule.probe] has.
func (o *Options) Validate() error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if len(o.Candidates) < 2 {
		add("candidates: want at least two schedulers, got %d", len(o.Candidates))
	}
	for i, c := range o.Candidates {
		if !sysfs.ValidSchedulerName(c) {
			add("candidates: %q is not a scheduler name", c)
		}
		if slices.Contains(o.Candidates[:i], c) {
			add("candidates: %s is named twice", c)
		}
	}
	if len(o.Candidates) > policy.ProbeMaxCandidates {
		add("candidates: at most %d", policy.ProbeMaxCandidates)
	}
	if o.Duration < policy.ProbeMinDuration || o.Duration > policy.ProbeMaxDuration {
		add("duration: %s is outside %s..%s", o.Duration, policy.ProbeMinDuration, policy.ProbeMaxDuration)
	}
	if o.Rounds < 1 || o.Rounds > policy.ProbeMaxRounds {
		add("rounds: %d is outside 1..%d", o.Rounds, policy.ProbeMaxRounds)
	}
	if o.Depth < 1 || o.Depth > policy.ProbeMaxDepth {
		add("depth: %d is outside 1..%d", o.Depth, policy.ProbeMaxDepth)
	}
	if err := policy.CheckProbeBlockSize(uint64(o.BlockSize)); err != nil {
		add("block size: %v", err)
	} else if o.Depth >= 1 && o.Depth <= policy.ProbeMaxDepth {
		if err := policy.CheckProbeInFlight(uint64(o.Depth), uint64(o.BlockSize)); err != nil {
			add("depth and block size: %v", err)
		}
	}
	switch o.Engine {
	case "", EngineIOUring, EnginePsync:
	default:
		add("engine: %q is not %s or %s", o.Engine, EngineIOUring, EnginePsync)
	}
	switch o.Choose {
	case ChooseBalanced, ChooseIOPS, ChooseLatency:
	default:
		add("choose: %q is not %s, %s or %s", o.Choose, ChooseBalanced, ChooseIOPS, ChooseLatency)
	}
	if o.Margin < 0 || o.Margin > policy.ProbeMaxMargin {
		add("margin: %g%% is outside 0%%..%g%%", o.Margin*100, policy.ProbeMaxMargin*100)
	}
	if len(errs) > 0 {
		return fmt.Errorf("probe options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Allowances in the time budget.
const (
	// busySample is how long the disk's stat is watched for others' I/O.
	busySample = 200 * time.Millisecond
	// switchAllowance covers one scheduler switch: ~24 ms measured here
	// (the queue is frozen and RCU grace periods waited for), more on a
	// loaded machine.
	switchAllowance = 150 * time.Millisecond
	// restoreAllowance covers putting the originals back at the end.
	restoreAllowance = 300 * time.Millisecond
	maxWarmup        = 250 * time.Millisecond
)

// warmup is the time spent reading before each candidate's measurements,
// discarded: the scheduler's structures and the caches below are filled.
func (o *Options) warmup() time.Duration { return min(o.Duration/4, maxWarmup) }

// Budget is the longest a probe with these options can take, from its
// start to its restore: the figure printed before starting. The probe
// stops measuring when it runs out.
func (o Options) Budget() time.Duration {
	o.fill()
	per := switchAllowance + o.warmup() + 2*o.Duration
	return busySample + time.Duration(o.Rounds*len(o.Candidates))*per + restoreAllowance
}
