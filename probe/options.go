package probe

import (
	"slices"
	"time"

	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/probe/probeopt"
)

// Options say how to probe: what to measure (probeopt.Options, shared with
// [rule.probe], whose zero fields mean their default but Margin's), and
// what to do around it.
type Options struct {
	probeopt.Options
	// Apply keeps the winner instead of restoring the original scheduler.
	Apply bool
	// Force probes a disk that others are using.
	Force bool
}

// DefaultOptions are what `iosched probe` and [rule.probe] use for what
// they do not set.
func DefaultOptions() Options { return Options{Options: probeopt.Default()} }

// FromPolicy turns a rule's [rule.probe] into options.
func FromPolicy(p *policy.Probe) Options {
	o := p.Options
	o.Candidates = slices.Clone(o.Candidates)
	return Options{Options: o}
}

func (o *Options) fill() { o.Options = o.WithDefaults() }

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
