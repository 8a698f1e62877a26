package observe

import (
	"errors"
	"math"
)

// DepthBounds are the upper bounds (in requests in flight) of Depths'
// buckets but the last, which has none (+Inf): log-spaced, so each
// bucket spans a doubling, the step on which probe curves are measured.
var DepthBounds = [...]float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// Depths accumulates a disk's busy time by the depth it ran at: between
// each two samples, the busy seconds go to the bucket of that interval's
// busy depth (the mean requests in flight while busy). Every field only
// grows, so it reads as a Prometheus histogram of busy seconds observed at
// a depth: the buckets made cumulative, Count the busy seconds and Sum the
// depth times those seconds (the time requests spent in flight).
type Depths struct {
	// Busy is the busy seconds per bucket, not cumulative: Busy[i] for
	// depths in (DepthBounds[i-1], DepthBounds[i]], the last beyond 256.
	Busy [len(DepthBounds) + 1]float64
	// Sum is the busy depth times the busy seconds, summed: the seconds
	// requests spent in flight.
	Sum float64
	// Reads and Writes are the I/Os completed.
	Reads, Writes uint64
}

// Bucket is the index in Busy of a busy depth.
func Bucket(depth float64) int {
	for i, b := range DepthBounds {
		if depth <= b {
			return i
		}
	}
	return len(DepthBounds)
}

// Count is the busy seconds over every bucket.
func (d *Depths) Count() float64 {
	var s float64
	for _, b := range d.Busy {
		s += b
	}
	return s
}

// Cumulative is Busy summed up to each bucket: the histogram's _bucket
// values, the last (+Inf) equal to Count.
func (d *Depths) Cumulative() [len(DepthBounds) + 1]float64 {
	var out [len(DepthBounds) + 1]float64
	var s float64
	for i, b := range d.Busy {
		s += b
		out[i] = s
	}
	return out
}

// Add accumulates the interval from sample a to the later sample b. An
// interval Between refuses (counters that went back, no time) adds
// nothing and returns its error; the caller starts again from b.
func (d *Depths) Add(a, b Sample) error {
	p, err := Between(a, b)
	if err != nil {
		return err
	}
	// Between checked that no counter went back.
	d.Reads += b.ReadIOs - a.ReadIOs
	d.Writes += b.WriteIOs - a.WriteIOs
	// The busy seconds are the kernel's io_ticks, not Busy times the
	// elapsed time: Busy is capped at 1, and the kernel's rounding can
	// put an interval's io_ticks past it, which the next one gives back.
	// So the totals add up to io_ticks' own.
	io, _ := TicksBetween(a.IOTicks, b.IOTicks)
	busy := float64(io) / 1000
	if busy == 0 || math.IsNaN(p.BusyDepth) {
		return nil
	}
	d.Busy[Bucket(p.BusyDepth)] += busy
	d.Sum += p.BusyDepth * busy
	return nil
}

// Observer samples one disk's stat file into its Depths. It is not safe
// for use by several goroutines at once; Depths is a copy, safe to keep.
type Observer struct {
	disk   *StatFile
	last   Sample
	primed bool
	depths Depths
}

// NewObserver opens the stat file at path (see StatPath). The first Step
// only takes the baseline.
func NewObserver(path string) (*Observer, error) {
	d, err := Open(path)
	if err != nil {
		return nil, err
	}
	return &Observer{disk: d}, nil
}

// Step takes a sample and adds the interval since the last one. Counters
// that went back (a reset, another disk of the name) add nothing: the
// sample becomes the new baseline and Step returns nil, as the totals
// stay right. A read error (the disk gone: ENODEV) is returned; the
// totals stay as they were.
func (o *Observer) Step() error {
	s, err := o.disk.Read()
	if err != nil {
		return err
	}
	if o.primed {
		switch err := o.depths.Add(o.last, s); {
		case errors.Is(err, ErrNoTime):
			// The clock did not move: the interval goes on from the
			// same baseline, so no I/O is lost.
			return nil
		case err != nil && !errors.Is(err, ErrWentBack):
			return err
		}
	}
	o.last, o.primed = s, true
	return nil
}

// Depths is what the observer has accumulated.
func (o *Observer) Depths() Depths { return o.depths }

// Close closes the stat file.
func (o *Observer) Close() error { return o.disk.Close() }
