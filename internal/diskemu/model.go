package diskemu

import (
	"math"
	"time"
)

// meanSqrtGap is E[sqrt|X-Y|] for X, Y independent and uniform on [0, 1]:
// the mean seek factor between two random reads served one after another
// (the integral of sqrt|x-y| over the unit square, 2/((a+1)(a+2)) with
// a = 1/2).
const meanSqrtGap = 8.0 / 15

// MeanService is the mean time a random read over the whole disk spends in
// a service slot: the service time plus, for a profile with a seek cost,
// the mean seek between two random offsets (reads are served in arrival
// order, so consecutive offsets are independent).
func (p Profile) MeanService() time.Duration {
	s := float64(p.Service.Mean)
	if p.Seek.on() {
		s += float64(p.Seek.Min) + float64(p.Seek.Max-p.Seek.Min)*meanSqrtGap
	}
	return time.Duration(s)
}

// Model is the IOPS p should deliver to a reader that keeps depth random
// reads of bs bytes in flight for a run of length over, starting with full
// buckets, then waits for its reads in flight (as fio does, and counts the
// wait in its run time); over 0 is a run long enough that neither bursts
// nor the wait count. path is the time a read spends outside the device
// (the kernel, the FUSE round trip, the reader).
//
// A closed loop of depth readers is bounded by the readers themselves
// (depth / (service + path)), by the slots (parallel / service) and by
// each bucket, which over a run of length T passes at most Burst + Rate*T
// tokens. The reads passed by T are the least of these bounds (each a line
// over T); the depth reads in flight at T then drain at the slope of the
// least bound there (a bucket's Rate once its burst is spent). The bounds
// are exact away from the knees where two of them meet.
func (p Profile) Model(depth, bs int, over, path time.Duration) float64 {
	s := p.MeanService().Seconds()
	if s <= 0 && path <= 0 {
		return math.Inf(1)
	}
	demand := float64(depth) / (s + path.Seconds())
	if s > 0 {
		demand = math.Min(demand, float64(p.Parallel)/s)
	}
	// The bounds as lines burst + rate*T, the reader's own first.
	type line struct{ burst, rate float64 }
	lines := []line{{0, demand}}
	for _, b := range p.IOPS {
		if b.on() {
			lines = append(lines, line{b.Burst, b.Rate})
		}
	}
	for _, b := range p.Bytes {
		if b.on() {
			lines = append(lines, line{b.Burst / float64(bs), b.Rate / float64(bs)})
		}
	}
	if over <= 0 {
		rate := demand
		for _, l := range lines {
			rate = math.Min(rate, l.rate)
		}
		return rate
	}
	t := over.Seconds()
	least := lines[0]
	for _, l := range lines[1:] {
		if v, m := l.burst+l.rate*t, least.burst+least.rate*t; v < m || (v == m && l.rate < least.rate) {
			least = l
		}
	}
	passed := least.burst + least.rate*t
	return (passed + float64(depth)) / (t + float64(depth)/least.rate)
}

// CreditsLast is how long p's burst credits last for a reader at depth
// (4 KiB reads) starting with full buckets: the time until the slowest
// bucket runs dry, or 0 when the demand never exceeds its rate.
func (p Profile) CreditsLast(depth int, path time.Duration) time.Duration {
	var last time.Duration
	for _, b := range p.IOPS {
		if !b.on() {
			continue
		}
		rest := p.withoutBucket(b).Model(depth, 4096, 0, path)
		if rest > b.Rate {
			d := time.Duration(b.Burst / (rest - b.Rate) * float64(time.Second))
			last = max(last, d)
		}
	}
	return last
}

func (p Profile) withoutBucket(drop Bucket) Profile {
	q := p
	q.IOPS = nil
	for _, b := range p.IOPS {
		if b != drop {
			q.IOPS = append(q.IOPS, b)
		}
	}
	return q
}
