package probe

import (
	"slices"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
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

func (o *Options) fill() { o.Options = o.WithDefaults() }

// Allowances in the time budget.
const (
	// busySample is how long the disk's stat is watched for others' I/O.
	busySample = 200 * time.Millisecond
	// switchAllowance covers one scheduler switch (the queue is frozen and
	// RCU grace periods waited for, contrib/bench/README.md), with room
	// for a loaded machine.
	switchAllowance = 150 * time.Millisecond
	// restoreAllowance covers putting the originals back at the end.
	restoreAllowance = 300 * time.Millisecond
	maxWarmup        = 250 * time.Millisecond
)

// warmup is the time spent reading before each candidate's measurements,
// discarded: the scheduler's structures and the caches below are filled.
func (o *Options) warmup() time.Duration { return min(o.Duration/4, maxWarmup) }

// Budget is the longest a probe with these options takes on a disk that
// answers at once, from its start to its restore. A slower disk's bound is
// longer, as its reads in flight take longer to drain after each
// measurement: Run announces it once it has sized the disk (see
// sizeDisk), and stops measuring when it runs out. A disk whose queue
// depth caps the depths takes no longer.
func (o Options) Budget() time.Duration {
	o.fill()
	return budgetFor(o, fastShape(o), len(pairsOf(o.Candidates, o.NrRequests)), busySample)
}

// measuredDepths are the depths each candidate is measured at in a
// round, ascending: the curve's, 1 (the depth-1 figures) and deep (the
// deep-queue figures), each measured once.
func measuredDepths(curve []int, deep int) []int {
	ds := slices.Concat(curve, []int{1, deep})
	slices.Sort(ds)
	return slices.Compact(ds)
}

// CapDepths are the curve's depths on a disk whose hardware queue holds
// queueDepth requests at once (Key.QueueDepth, its mq/0/nr_tags; 0 when
// unknown, which caps nothing): a deeper depth becomes queueDepth. The
// cap is the hardware's tag count, not nr_requests: nr_requests is the
// scheduler's pool (twice the tags with an elevator, the tags with none,
// reset by each switch), so capping by it would measure each candidate at
// other depths; and past the tags, the disk holds no more, so a deeper
// point measures reads waiting for a tag (in the scheduler, or in the
// submitter with none), not the disk.
func CapDepths(depths []int, queueDepth int) []int {
	out := slices.Clone(depths)
	if queueDepth <= 0 {
		return out
	}
	for i, d := range out {
		out[i] = min(d, queueDepth)
	}
	return slices.Compact(out)
}
