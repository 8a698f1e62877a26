package observe

import (
	"errors"
	"time"
)

// Point is a disk's operating point between two samples.
type Point struct {
	// At is when the later sample was taken; Elapsed the time between the
	// two.
	At      time.Time
	Elapsed time.Duration
	// ReadIOPS and WriteIOPS are the reads and writes completed per
	// second.
	ReadIOPS, WriteIOPS float64
	// ReadFraction is the reads' share of the I/Os (0 without I/O).
	ReadFraction float64
	// MeanSizeBytes is the bytes per I/O (0 without I/O).
	MeanSizeBytes float64
	// LatencyUs is the mean time a read or write took, from its start
	// to its completion, in microseconds (0 without I/O). The kernel
	// counts whole milliseconds summed over requests, so it is exact
	// only over many.
	LatencyUs float64
	// Busy is the fraction of the time the disk had a request in flight
	// (io_ticks), at most 1.
	Busy float64
	// QueueDepth is the mean requests in flight over the whole time
	// (time_in_queue over elapsed time, by Little's law).
	QueueDepth float64
	// BusyDepth is the mean requests in flight while the disk was busy
	// (time_in_queue over io_ticks): the depth the disk's curve is read at. 0 when
	// the disk was never busy.
	BusyDepth float64
}

// IOPS is the reads and writes completed per second.
func (p Point) IOPS() float64 { return p.ReadIOPS + p.WriteIOPS }

// Idle reports whether no read or write completed: the disk gave no
// depth to judge by.
func (p Point) Idle() bool { return p.IOPS() == 0 }

// ErrWentBack is Between's answer when a counter is lower in the later
// sample: the disk was reset or is another one with the same name.
var ErrWentBack = errors.New("the disk's counters went back (reset, or another disk of that name): no point between these samples")

// ErrNoTime is Between's answer when the later sample is not later.
var ErrNoTime = errors.New("no time between the samples")

// The kernel prints its tick fields as 32-bit milliseconds (part_stat_show
// in block/genhd.c: "%8u"), so they wrap: time_in_queue at 32 requests in
// flight every 1.5 days.
const tickWrap = 1 << 32

// TicksBetween is how far a tick field (Stat's ReadTicks, WriteTicks,
// IOTicks, TimeInQueue) went from a to the later reading b, counted
// through a wrap of its 32 bits. False when it went back otherwise (a
// reset, or another disk of the name).
func TicksBetween(a, b uint64) (uint64, bool) {
	switch {
	case b >= a:
		return b - a, true
	case a < tickWrap && b < tickWrap:
		return b + tickWrap - a, true
	}
	return 0, false
}

// Between is the operating point from sample a to the later sample b.
// A tick field that wrapped around 32 bits is counted through the wrap;
// any other counter that went back gives ErrWentBack, never a point.
func Between(a, b Sample) (Point, error) {
	el := b.At.Sub(a.At)
	if el <= 0 {
		return Point{}, ErrNoTime
	}
	ok := true
	count := func(x, y uint64) uint64 {
		if y < x {
			ok = false
			return 0
		}
		return y - x
	}
	ticks := func(x, y uint64) uint64 {
		d, forward := TicksBetween(x, y)
		ok = ok && forward
		return d
	}
	reads := count(a.ReadIOs, b.ReadIOs)
	writes := count(a.WriteIOs, b.WriteIOs)
	sectors := count(a.ReadSectors, b.ReadSectors) + count(a.WriteSectors, b.WriteSectors)
	lat := ticks(a.ReadTicks, b.ReadTicks) + ticks(a.WriteTicks, b.WriteTicks)
	io := ticks(a.IOTicks, b.IOTicks)
	queue := ticks(a.TimeInQueue, b.TimeInQueue)
	ms := float64(el) / float64(time.Millisecond)
	// A busy time past the elapsed time by more than the kernel's
	// rounding (a jiffy, at most 10 ms) is a reset that looked like a
	// wrap, not a measurement.
	if !ok || float64(io) > ms+20 {
		return Point{}, ErrWentBack
	}
	s := el.Seconds()
	p := Point{At: b.At, Elapsed: el, ReadIOPS: float64(reads) / s, WriteIOPS: float64(writes) / s}
	if n := reads + writes; n > 0 {
		p.ReadFraction = float64(reads) / float64(n)
		p.MeanSizeBytes = float64(sectors) * 512 / float64(n)
		p.LatencyUs = float64(lat) * 1000 / float64(n)
	}
	p.Busy = min(float64(io)/ms, 1)
	p.QueueDepth = float64(queue) / ms
	// The depth while busy is time in flight over busy time, both the
	// kernel's: dividing by the capped Busy would read a busy time past
	// the elapsed one (the kernel's rounding) as a deeper queue.
	if io > 0 {
		p.BusyDepth = float64(queue) / float64(io)
	}
	return p, nil
}
