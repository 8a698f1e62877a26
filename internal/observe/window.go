package observe

import (
	"math"
	"time"
)

// Window sums a disk's operating points over the last Span in fixed
// memory, whatever the sample rate: a ring of slots, each Span/Slots long,
// holding the sums of the points that ended in it and a histogram of busy
// depth weighted by busy time, with the I/Os and their latency at each
// depth. Points leave a slot at a time, so the window covers between
// Span-Span/Slots and Span. It is not safe for use by several goroutines
// at once, and holds no pointer: a copy is another window.
type Window struct {
	span, slot time.Duration
	origin     time.Time
	// newest is the index (time since origin over slot) of the newest
	// slot written; -1 before the first point.
	newest int64
	slots  [Slots]windowSlot
}

// Slots is how many slots a Window's span is divided into.
const Slots = 8

// Busy depth bins: bin 0 holds depths below 1, bin k (1..depthBins-2)
// depths from 2^((k-1)/2) to 2^(k/2), the last 1024 and beyond. Each bin
// also sums its depths (weighted by busy time), so a quantile is the mean
// depth of the bin it falls in: exact for a disk that ran at one depth,
// within the bin's width (a factor of 1.41) otherwise. Each bin also sums
// the I/Os completed at its depths and their latency, for the latency per
// I/O at a depth (LatencyNear).
const (
	depthBins    = 22
	binsPerOctet = 2
)

type windowSlot struct {
	index int64
	// elapsed and busy time in seconds; I/Os; reads; bytes; latency
	// summed over I/Os in microseconds; requests in flight summed over
	// time (request-seconds).
	elapsed, busy, ios, reads, bytes, latency, queue float64
	// busyAt is the busy seconds spent in each busy depth bin, depthAt
	// their busy depths summed weighted by those seconds; iosAt the I/Os
	// completed at those depths and latencyAt their latency summed over
	// them (microseconds). float32 keeps a window within 4 KiB; a slot's
	// sums lose at most a few parts in ten million.
	busyAt, depthAt, iosAt, latencyAt [depthBins]float32
}

// NewWindow returns an empty window of span (positive).
func NewWindow(span time.Duration) *Window {
	w := &Window{span: span, slot: max(span/Slots, 1), newest: -1}
	return w
}

// Reset empties the window (a disk whose scheduler changed starts a new
// one).
func (w *Window) Reset() { *w = Window{span: w.span, slot: w.slot, newest: -1} }

func (w *Window) indexOf(t time.Time) int64 {
	d := t.Sub(w.origin)
	if d < 0 {
		return -1
	}
	return int64(d / w.slot)
}

// Add counts p in the slot of p.At. A point older than the window's
// oldest slot is dropped, and so is one with a NaN or infinite figure (it
// would spoil every sum it joined). A point without a busy depth (0: no
// time in flight, or one its caller found says nothing of the depth)
// counts in the window's sums but in no depth bin.
func (w *Window) Add(p Point) {
	if p.Elapsed <= 0 || !finite(p.ReadIOPS+p.WriteIOPS+p.MeanSizeBytes+p.LatencyUs+p.Busy+p.QueueDepth+p.BusyDepth) {
		return
	}
	if w.newest < 0 {
		w.origin, w.newest = p.At, 0
	}
	i := w.indexOf(p.At)
	if i < 0 || i <= w.newest-Slots {
		return
	}
	w.newest = max(w.newest, i)
	s := &w.slots[i%Slots]
	if s.index != i {
		*s = windowSlot{index: i}
	}
	el := p.Elapsed.Seconds()
	ios := p.IOPS() * el
	busy := p.Busy * el
	s.elapsed += el
	s.busy += busy
	s.ios += ios
	s.reads += p.ReadIOPS * el
	s.bytes += p.MeanSizeBytes * ios
	s.latency += p.LatencyUs * ios
	s.queue += p.QueueDepth * el
	if busy > 0 && p.BusyDepth > 0 {
		k := depthBin(p.BusyDepth)
		s.busyAt[k] += float32(busy)
		s.depthAt[k] += float32(busy * p.BusyDepth)
		s.iosAt[k] += float32(ios)
		s.latencyAt[k] += float32(p.LatencyUs * ios)
	}
}

// finite reports whether x is neither NaN nor infinite; a sum of figures
// is finite only when each of them is.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func depthBin(d float64) int {
	if d < 1 || math.IsNaN(d) {
		return 0
	}
	k := 1 + int(math.Floor(math.Log2(d)*binsPerOctet))
	return min(k, depthBins-1)
}

// nearBins are the first and last depth bins that hold a depth within
// factor (at least 1) of d.
func nearBins(d, factor float64) (int, int) {
	return depthBin(d / factor), depthBin(d * factor)
}

// Near reports whether busy depth x is among the depths LatencyNear(d,
// factor) reads: whether x's depth bin holds a depth within factor of d.
// A caller that sums its own points by this test compares like with
// like with the window's.
//
// The bins are a factor of 1.41 wide and taken whole, so "near" is wider
// than factor: every depth within factor of d is near, and none further
// than factor x 1.41 (2.1 for a factor of 1.5).
func Near(x, d, factor float64) bool {
	if !(x > 0) {
		return false
	}
	lo, hi := nearBins(d, factor)
	k := depthBin(x)
	return k >= lo && k <= hi
}

// live calls f with each slot still in the window at now.
func (w *Window) live(now time.Time, f func(*windowSlot)) {
	if w.newest < 0 {
		return
	}
	cur := max(w.indexOf(now), w.newest)
	for k := range w.slots {
		s := &w.slots[k]
		if s.elapsed > 0 && s.index > cur-Slots {
			f(s)
		}
	}
}

// Summary is where a disk ran over a window.
type Summary struct {
	// Covered is the time the window's points span (at most its Span).
	Covered time.Duration
	// IOPS, ReadFraction, MeanSizeBytes, LatencyUs, Busy and QueueDepth
	// are Point's, over the whole window.
	IOPS, ReadFraction, MeanSizeBytes, LatencyUs, Busy, QueueDepth float64
	// BusyDepth is the median busy depth, weighted by busy time: the disk
	// spent half its busy time at a lower depth and half at a higher one.
	// 0 when it was never busy.
	BusyDepth float64
}

// Idle reports whether no I/O completed in the window.
func (s Summary) Idle() bool { return s.IOPS == 0 }

// Summary is the window's operating point at now: points older than the
// window are left out.
func (w *Window) Summary(now time.Time) Summary {
	var t windowSlot
	w.live(now, func(s *windowSlot) {
		t.elapsed += s.elapsed
		t.busy += s.busy
		t.ios += s.ios
		t.reads += s.reads
		t.bytes += s.bytes
		t.latency += s.latency
		t.queue += s.queue
	})
	if t.elapsed == 0 {
		return Summary{}
	}
	sum := Summary{
		Covered:    time.Duration(t.elapsed * float64(time.Second)),
		IOPS:       t.ios / t.elapsed,
		Busy:       min(t.busy/t.elapsed, 1),
		QueueDepth: t.queue / t.elapsed,
		BusyDepth:  w.Quantile(now, 0.5),
	}
	if t.ios > 0 {
		sum.ReadFraction = t.reads / t.ios
		sum.MeanSizeBytes = t.bytes / t.ios
		sum.LatencyUs = t.latency / t.ios
	}
	return sum
}

// Quantile is the busy depth below which the disk spent fraction q
// (0..1) of its busy time over the window at now: the mean busy depth of
// the bin it falls in (see depthBins). 0 when the disk was never busy.
func (w *Window) Quantile(now time.Time, q float64) float64 {
	var busy, depth [depthBins]float64
	var total float64
	w.live(now, func(s *windowSlot) {
		for i := range s.busyAt {
			busy[i] += float64(s.busyAt[i])
			depth[i] += float64(s.depthAt[i])
			total += float64(s.busyAt[i])
		}
	})
	if total == 0 {
		return 0
	}
	want := min(max(q, 0), 1) * total
	var acc float64
	last := 0
	for i, v := range busy {
		if v == 0 {
			continue
		}
		last = i
		if acc += v; acc >= want {
			break
		}
	}
	return depth[last] / busy[last]
}

// LatencyNear is the mean latency per I/O in microseconds, and the I/Os
// it is the mean of, of the window's busy points at depths near d (see
// Near for what near means) at now. 0, 0 when none completed an I/O.
func (w *Window) LatencyNear(now time.Time, d, factor float64) (latencyUs, ios float64) {
	if !(d > 0) {
		return 0, 0
	}
	lo, hi := nearBins(d, factor)
	var lat float64
	w.live(now, func(s *windowSlot) {
		for k := lo; k <= hi; k++ {
			ios += float64(s.iosAt[k])
			lat += float64(s.latencyAt[k])
		}
	})
	if ios <= 0 {
		return 0, 0
	}
	return lat / ios, ios
}
