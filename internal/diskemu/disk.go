package diskemu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Disk is the emulated device behind the FUSE file: Read blocks for the
// time the profile says a read takes, given the reads in service and the
// buckets' state.
type Disk struct {
	p    Profile
	size int64
	// slots holds, a slot free, when that slot's previous read was due to
	// end; reads waiting for a slot queue in arrival order.
	slots chan time.Time

	mu    sync.Mutex // guards what follows
	iops  []bucket
	bytes []bucket
	rng   *rand.Rand
	head  int64 // where the previous read ended

	clock     sleeper
	reads     atomic.Int64
	inside    atomic.Int64 // ns, summed over reads, from Read's start to its end
	inService atomic.Int64
	peak      atomic.Int64 // most reads in service at once since Refill
}

// New returns a disk of size bytes that serves as p says.
func New(p Profile, size int64) (*Disk, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := &Disk{p: p, size: size, slots: make(chan time.Time, p.Parallel), rng: rand.New(rand.NewPCG(1, 2))}
	for range p.Parallel {
		d.slots <- time.Time{}
	}
	now := time.Now()
	for _, b := range p.IOPS {
		if b.on() {
			d.iops = append(d.iops, bucket{Bucket: b, tokens: b.Burst, at: now})
		}
	}
	for _, b := range p.Bytes {
		if b.on() {
			d.bytes = append(d.bytes, bucket{Bucket: b, tokens: b.Burst, at: now})
		}
	}
	return d, nil
}

// Profile is the profile d serves.
func (d *Disk) Profile() Profile { return d.p }

// Size is the disk's size in bytes.
func (d *Disk) Size() int64 { return d.size }

// Read takes the time a read of n bytes at off takes on the disk: its
// tokens, a service slot, then its service time and seek.
func (d *Disk) Read(off int64, n int) {
	entry := time.Now()
	d.mu.Lock()
	ready := entry
	for i := range d.iops {
		ready = later(ready, d.iops[i].take(ready, 1))
	}
	for i := range d.bytes {
		ready = later(ready, d.bytes[i].take(ready, float64(n)))
	}
	d.mu.Unlock()
	d.clock.until(ready)

	// A read that waited for its slot starts when the slot's previous read
	// was due to end, not when this goroutine got to run: the device is
	// busy back to back, whatever the Go scheduler's delays. A read that
	// found a slot free starts now, even if the slot's previous read woke
	// a little before its due time (the sleeper aims early by its average
	// lateness): starting then would add that to this read.
	var start time.Time
	select {
	case <-d.slots:
		start = time.Now()
	default:
		start = later(time.Now(), <-d.slots)
	}
	in := d.inService.Add(1)
	for {
		p := d.peak.Load()
		if in <= p || d.peak.CompareAndSwap(p, in) {
			break
		}
	}
	d.mu.Lock()
	end := start.Add(d.draw() + d.seek(off))
	d.head = off + int64(n)
	d.mu.Unlock()
	d.clock.until(end)
	d.inService.Add(-1)
	d.slots <- end
	d.inside.Add(int64(time.Since(entry)))
	d.reads.Add(1)
}

// Refill fills every bucket (a disk whose credits were never spent) and
// starts a new count of the reads in service at once.
func (d *Disk) Refill() {
	d.mu.Lock()
	now := time.Now()
	for i := range d.iops {
		d.iops[i].tokens, d.iops[i].at = d.iops[i].Burst, now
	}
	for i := range d.bytes {
		d.bytes[i].tokens, d.bytes[i].at = d.bytes[i].Burst, now
	}
	d.mu.Unlock()
	d.peak.Store(d.inService.Load())
}

// Stats is what a disk has served.
type Stats struct {
	Reads int64 // reads served
	// Inside is the time reads spent in the disk (in Read), summed: over
	// Reads, the mean latency the device itself gave.
	Inside time.Duration
	// PeakInService is the most reads in service at once since the last
	// Refill: the depth that reached the device.
	PeakInService int64
}

// Stats returns what d has served.
func (d *Disk) Stats() Stats {
	return Stats{Reads: d.reads.Load(), Inside: time.Duration(d.inside.Load()), PeakInService: d.peak.Load()}
}

// draw returns a service time from the profile's distribution. d.mu held.
func (d *Disk) draw() time.Duration {
	s := d.p.Service
	switch s.Kind {
	case "normal":
		return max(0, time.Duration(float64(s.Mean)+float64(s.Spread)*d.rng.NormFloat64()))
	case "lognormal":
		if s.Mean <= 0 {
			return 0
		}
		cv := float64(s.Spread) / float64(s.Mean)
		sigma2 := math.Log1p(cv * cv)
		mu := math.Log(float64(s.Mean)) - sigma2/2
		return time.Duration(math.Exp(mu + math.Sqrt(sigma2)*d.rng.NormFloat64()))
	}
	return s.Mean
}

// seek returns the cost of moving from the previous read to off. d.mu held.
func (d *Disk) seek(off int64) time.Duration {
	if !d.p.Seek.on() || off == d.head || d.size <= 0 {
		return 0
	}
	gap := math.Abs(float64(off-d.head)) / float64(d.size)
	return d.p.Seek.Min + time.Duration(float64(d.p.Seek.Max-d.p.Seek.Min)*math.Sqrt(min(gap, 1)))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// bucket is a token bucket that lends: a read takes its tokens at once,
// leaving the bucket in debt, and waits until the debt would have been
// repaid, so reads pass in the order they asked and at exactly Rate once
// the burst is spent.
type bucket struct {
	Bucket
	tokens float64
	at     time.Time
}

// take takes n tokens at now and returns when the read may go.
func (b *bucket) take(now time.Time, n float64) time.Time {
	if now.After(b.at) {
		b.tokens = math.Min(b.Burst, b.tokens+b.Rate*now.Sub(b.at).Seconds())
		b.at = now
	}
	b.tokens -= n
	if b.tokens >= 0 {
		return now
	}
	return now.Add(time.Duration(-b.tokens / b.Rate * float64(time.Second)))
}

// sleeper sleeps until a deadline more precisely than time.Sleep: the Go
// runtime's timers wake through epoll_pwait, whose timeout is in whole
// milliseconds (netpoll in runtime/netpoll_epoll.go rounds a shorter
// delay up to 1 ms), so a 100 us sleep takes about a millisecond when the
// process is otherwise idle. A nanosleep on a thread of its own with a
// timer slack of 1 ns wakes within the scheduler's latency, and that
// lateness, averaged, is taken off the next sleeps so that a read's time
// in the device averages the time drawn for it.
type sleeper struct {
	late atomic.Int64 // ns, moving average of how late a sleep woke
}

// lateCap bounds the correction: a machine whose wake-ups are later than
// this is too busy to emulate the profile, and must not have its reads
// end early by more than this.
const lateCap = 2 * time.Millisecond

func (s *sleeper) until(deadline time.Time) {
	aim := deadline.Add(-time.Duration(s.late.Load()))
	wait := time.Until(aim)
	if wait <= 0 {
		return
	}
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(wait))
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			break
		}
		ts = rem
	}
	runtime.UnlockOSThread()
	late := min(max(time.Since(aim), 0), lateCap)
	old := s.late.Load()
	s.late.Store(old + (int64(late)-old)/32)
}
