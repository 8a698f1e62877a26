package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// A probe's time goes mostly to its measurements, but not only: after each
// one's end the reads it left in flight must complete before the next
// switch (a switch freezes the queue and waits for them), and on a disk
// that serves one request at a time the last of d reads in flight takes d
// read times. At 10 ms a read, draining 64 costs 0.64 s a point, more than
// a default measurement. So before the first switch a probe sizes its
// disk: a few reads at depth 1 give the read time, and where draining the
// deepest point would cost a noticeable part of a measurement, a short
// pass up the depths finds where IOPS stops growing. Depths past that
// point are dropped (there the curve is flat: more depth only queues), the
// drain of each kept depth is counted in the budget announced, and the
// grace after which reads that have not come back mean a dead disk scales
// with the read time and the depth.
const (
	// latencyReads are the depth-1 reads that give the read time.
	latencyReads = 8
	// latencyWait bounds them: a disk that completes fewer within it
	// (reads over latencyWait/latencyReads each) is too slow to probe,
	// and one that completes none within latencyWait plus hangGrace
	// does not answer.
	latencyWait = time.Second
	// drainFloor is what a measurement costs beyond its duration and
	// its reads' drain: the stat reads around it, its readers' start.
	drainFloor = 20 * time.Millisecond
	// drainMargin multiplies the drain measured or bounded, for a disk
	// slower at one moment than at another.
	drainMargin = 1.5
	// costlyShare, costlyDrain: a ramp up the depths is run when
	// draining the deepest point could cost more than this share of a
	// measurement, and more than costlyDrain (less is not worth the
	// ramp's own time).
	costlyShare = 1.0 / 8
	costlyDrain = 50 * time.Millisecond
	// flatGain: a depth whose IOPS is less than this factor over the
	// depth before's is where the curve stops growing.
	flatGain = 1.10
	// minRampPoint and rampReads bound each point of the ramp: long
	// enough for rampReads reads at depth 1, and at least minRampPoint.
	minRampPoint = 50 * time.Millisecond
	rampReads    = 20
	// minReadsPerMeasurement: a measurement shorter than this many
	// depth-1 read times measures its own start and drain.
	minReadsPerMeasurement = 2
)

// shape is what a probe learns of its disk before the first switch.
type shape struct {
	// lat is the median depth-1 read time, latMax the slowest seen.
	lat, latMax time.Duration
	// depths are the curve's depths kept, deep the deep-queue depth:
	// each no deeper than where IOPS stopped growing.
	depths []int
	deep   int
	// dropped are the depths asked for that were dropped.
	dropped []int
	// flatAt is the depth at which IOPS stopped growing, 0 when it
	// did not (or no ramp was run).
	flatAt int
	// drain is, per depth measured in the ramp, how long its reads
	// took at most; depths not in it are bounded from lat (not latMax:
	// one read held up by a moment's load is no drain of many).
	drain map[int]time.Duration
	// ramped: the ramp up the depths ran.
	ramped bool
}

// fastShape is the shape of a disk that answers at once: Options.Budget's.
func fastShape(o Options) shape {
	return shape{depths: o.Depths, deep: o.Depth}
}

// drainOf is how long the reads of a measurement at depth may take to
// come back after its end, counted in the budget: what the ramp measured
// at that depth, else what a disk serving one read at a time would take
// (depth read times), with a margin, and drainFloor.
func (s *shape) drainOf(depth int) time.Duration {
	d, ok := s.drain[depth]
	if !ok {
		d = time.Duration(depth) * s.lat
	}
	return time.Duration(float64(d)*drainMargin) + drainFloor
}

// graceOf is how long after a measurement at depth, or after the last of
// its reads that came back since, none may come back before the disk
// counts as not answering (Job.Grace): twice what the budget counts for
// draining them all, and at least hangGrace. A slow disk still draining
// is not a dead one.
func (s *shape) graceOf(depth int) time.Duration {
	return max(hangGrace, 2*s.drainOf(depth))
}

// budgetFor is the longest a probe with o and ncand candidates takes on a
// disk of shape s, sized took after its start: the measurements, each
// with its drain, a switch and a warm-up per candidate and round, and the
// restore.
func budgetFor(o Options, s shape, ncand int, took time.Duration) time.Duration {
	per := switchAllowance + o.warmup() + s.drainOf(s.deep)
	for _, d := range measuredDepths(s.depths, s.deep) {
		per += o.Duration + s.drainOf(d)
	}
	if len(o.NrRequests) > 0 {
		per += switchAllowance // the write of nr_requests freezes the queue too
	}
	return took + time.Duration(o.Rounds*ncand)*per + restoreAllowance
}

// sizingBound is the longest sizing can take before the ramp, which is
// only run, and its own bound announced, once the read time is known.
const sizingBound = busySample + latencyWait + hangGrace

// limitedOffsets returns random block offsets over size bytes, n in all.
func limitedOffsets(size int64, blockSize int, seed uint64, n int) func(w int) func() (int64, bool) {
	return func(w int) func() (int64, bool) {
		blocks := uint64(size / int64(blockSize))
		rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
		left := n
		return func() (int64, bool) {
			if left <= 0 {
				return 0, false
			}
			left--
			return int64(rng.Uint64N(blocks)) * int64(blockSize), true
		}
	}
}

// sizeDisk measures the disk's read time and, where draining the deepest
// point would be costly, runs the ramp up the depths; it returns the shape
// the probe then runs with. It reads only, under the disk's own scheduler,
// before anything is switched. say tells what it found; bound is told how
// much longer the ramp can take, before it starts. pool, when not 0, is
// the disk's nr_requests while it is sized, in a probe that measures
// other values of it: reads past it wait for a request, so a curve flat
// past it may be the pool's, not the disk's, and no depth is dropped.
func sizeDisk(ctx context.Context, eng Engine, fd int, size int64, o Options, pool int, say func(string, ...any), bound func(time.Duration)) (shape, error) {
	s := shape{depths: o.Depths, deep: o.Depth, drain: map[int]time.Duration{}}
	sm, err := eng.Run(ctx, &Job{FD: fd, BlockSize: o.BlockSize, Depth: 1, Deadline: time.Now().Add(latencyWait), Size: size,
		Offsets: limitedOffsets(size, o.BlockSize, 1<<40, latencyReads)})
	if err != nil {
		return s, fmt.Errorf("measuring the read time (%d reads at depth 1): %w", latencyReads, err)
	}
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if sm.Reads == 0 || len(sm.Latencies) == 0 {
		return s, fmt.Errorf("measuring the read time: no read completed within %s: %w", latencyWait, ErrStuck)
	}
	lats := slices.Clone(sm.Latencies)
	slices.Sort(lats)
	s.lat = time.Duration(lats[len(lats)/2])
	s.latMax = time.Duration(lats[len(lats)-1])
	if sm.Reads < latencyReads {
		return s, fmt.Errorf("the disk is too slow to probe: %d of %d reads at depth 1 completed within %s (%s a read)",
			sm.Reads, latencyReads, latencyWait, s.lat.Round(time.Millisecond))
	}
	if o.Duration < minReadsPerMeasurement*s.lat {
		want := min(max((10*s.lat).Round(10*time.Millisecond), probeopt.MinDuration), probeopt.MaxDuration)
		return s, fmt.Errorf("a measurement of %s is too short for this disk, whose reads take %s each at depth 1: ask for at least %s (--duration, or duration in [rule.probe])",
			o.Duration, s.lat.Round(time.Microsecond), want)
	}

	measured := measuredDepths(o.Depths, o.Depth)
	deepest := measured[len(measured)-1]
	if d := s.drainOf(deepest) - drainFloor; d <= costlyDrain || float64(d) <= float64(o.Duration)*costlyShare {
		return s, nil
	}
	s.ramped = true
	point := min(max(rampReads*s.lat, minRampPoint), o.Duration)
	var most time.Duration
	for _, d := range measured {
		most += point + s.graceOf(d)
	}
	bound(most)
	say("reads take %s at depth 1: draining %d of them could cost %s a measurement; a pass up the depths (%s each) finds where IOPS stops growing, at most %s",
		s.lat.Round(time.Microsecond), deepest, s.drainOf(deepest).Round(time.Millisecond), point.Round(time.Millisecond), most.Round(100*time.Millisecond))
	var prev float64
	flat := 0
	for _, d := range measured {
		sm, err := eng.Run(ctx, &Job{FD: fd, BlockSize: o.BlockSize, Depth: d, Deadline: time.Now().Add(point), Size: size,
			Seed: uint64(d)<<2 | 2, Grace: s.graceOf(d)})
		if err != nil {
			return s, fmt.Errorf("sizing the disk at depth %d: %w", d, err)
		}
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if len(sm.Latencies) > 0 {
			s.drain[d] = time.Duration(slices.Max(sm.Latencies))
		}
		iops := summarize(sm, o.BlockSize).iops
		if prev > 0 && iops < prev*flatGain {
			flat = d
			break
		}
		prev = max(prev, iops)
	}
	if flat == 0 || flat == deepest {
		return s, nil // nothing deeper to drop
	}
	if pool > 0 && flat > pool {
		say("IOPS stops growing at depth %d, past the disk's nr_requests %d, which nr_requests candidates change: no depth dropped", flat, pool)
		return s, nil
	}
	s.flatAt = flat
	s.depths = nil
	for _, d := range o.Depths {
		if d <= flat {
			s.depths = append(s.depths, d)
		}
	}
	if len(s.depths) == 0 {
		s.depths = o.Depths[:1]
	}
	s.deep = min(o.Depth, flat)
	for _, d := range measured {
		if d > flat && (slices.Contains(o.Depths, d) || d == o.Depth) {
			s.dropped = append(s.dropped, d)
		}
	}
	say("IOPS stops growing at depth %d (%s IOPS): depths %s dropped (deeper only queues; each would cost its drain)",
		flat, kilo(prev), joinInts(s.dropped))
	return s, nil
}

// describe is the shape in a few words, for the probe's first lines.
func (s *shape) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reads take %s at depth 1 (slowest %s)", us(float64(s.lat)/1e3), us(float64(s.latMax)/1e3))
	if s.ramped {
		var most time.Duration
		for _, d := range measuredDepths(s.depths, s.deep) {
			most = max(most, s.drainOf(d))
		}
		fmt.Fprintf(&b, "; drain counted per point up to %s", most.Round(time.Millisecond))
	}
	return b.String()
}
