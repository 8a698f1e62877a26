package metrics

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"
)

// burstGap is the quiet time that ends a burst: disks applied less than
// this apart belong to the same one.
const burstGap = time.Second

// burstSize is how many of the latest disks are kept: enough for a burst
// of a thousand disks at once, 32 KiB.
const burstSize = 2048

// burstLog keeps when each of the latest disks was applied and how long
// after its uevent, in a ring written with atomics only: a burst's passes
// add to it at once, and a reader may see a slot half written, which
// costs at most one sample's accuracy.
type burstLog struct {
	next  atomic.Uint64
	slots [burstSize]struct{ at, took atomic.Int64 } // unix ns, ns
}

func (b *burstLog) add(at time.Time, took time.Duration) {
	i := (b.next.Add(1) - 1) % burstSize
	b.slots[i].at.Store(at.UnixNano())
	b.slots[i].took.Store(int64(took))
}

// Burst is the event-to-applied latency of the last burst: the disks
// applied with less than a second between one and the next, ending with
// the latest.
type Burst struct {
	Disks int `json:"disks"`
	// Truncated: the burst was longer than the disks kept (2048); the
	// figures are the latest ones's.
	Truncated bool          `json:"truncated,omitempty"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	// Start and End are when its first and last disk were applied.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// LastBurst summarises the last burst; Disks is 0 when no disk has been
// applied after a uevent yet.
func (r *Recorder) LastBurst() Burst {
	b := &r.burst
	n := min(b.next.Load(), burstSize)
	type sample struct{ at, took int64 }
	samples := make([]sample, 0, n)
	for i := range n {
		s := &b.slots[i]
		if at := s.at.Load(); at != 0 {
			samples = append(samples, sample{at, s.took.Load()})
		}
	}
	if len(samples) == 0 {
		return Burst{}
	}
	slices.SortFunc(samples, func(a, b sample) int { return cmp.Compare(b.at, a.at) }) // latest first
	took := []int64{samples[0].took}
	for i := 1; i < len(samples) && samples[i-1].at-samples[i].at < int64(burstGap); i++ {
		took = append(took, samples[i].took)
	}
	first := samples[len(took)-1]
	slices.Sort(took)
	return Burst{
		Disks:     len(took),
		Truncated: len(took) == burstSize,
		P50:       time.Duration(took[percentileIndex(len(took), 50)]),
		P99:       time.Duration(took[percentileIndex(len(took), 99)]),
		Max:       time.Duration(took[len(took)-1]),
		Start:     time.Unix(0, first.at),
		End:       time.Unix(0, samples[0].at),
	}
}

// percentileIndex is the nearest-rank percentile's index in n sorted
// values: the smallest value that at least p% of them do not exceed.
func percentileIndex(n, p int) int {
	rank := (p*n + 99) / 100 // ceil(p*n/100)
	return max(rank, 1) - 1
}
