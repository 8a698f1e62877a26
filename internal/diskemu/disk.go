package diskemu

import (
	"container/heap"
	"fmt"
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

	// overhead is the Profile.Overhead (ns) of the scheduler the loop in
	// front of the disk runs now (SetScheduler).
	overhead  atomic.Int64
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
	end := start.Add(d.draw() + d.seek(off) + time.Duration(d.overhead.Load()))
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

// SetScheduler tells the disk which scheduler the loop device in front of
// it runs: its reads take the profile's Overhead for it from now on.
func (d *Disk) SetScheduler(name string) {
	d.overhead.Store(int64(d.p.Overhead[name]))
}

// SetCredits leaves n burst credits (at most the bucket's burst) in the
// profile's credit bucket, the IOPS bucket with the largest burst: 0 is a
// disk whose credits just ran out, so that a test can have the cliff at
// a moment of its choosing. It returns the credits left.
func (d *Disk) SetCredits(n float64) (float64, error) {
	if math.IsNaN(n) || n < 0 {
		return 0, fmt.Errorf("credits %g: want a number >= 0", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var credit *bucket
	for i := range d.iops {
		if credit == nil || d.iops[i].Burst > credit.Burst {
			credit = &d.iops[i]
		}
	}
	if credit == nil {
		return 0, fmt.Errorf("disk profile %q has no IOPS bucket: no credits to set", d.p.Name)
	}
	credit.tokens, credit.at = math.Min(n, credit.Burst), time.Now()
	return credit.tokens, nil
}

// Close releases the disk's timer. No read may be under way or come after.
func (d *Disk) Close() { d.clock.close() }

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
// process is otherwise idle. A timerfd armed for the earliest deadline
// fires to the microsecond, and one thread blocked reading it wakes every
// read that is due: sleeping reads hold no thread. (Read through the
// runtime's poller instead, the timer's wake-up waits whenever both Ps
// are busy, until one idles or sysmon polls.) The lateness that remains (the scheduler's), averaged, is
// taken off the next sleeps so that a read's time in the device averages
// the time drawn for it.
type sleeper struct {
	late atomic.Int64 // ns, moving average of how late a sleep woke

	once sync.Once
	err  error // no timerfd: each sleep takes a nanosleep on a thread
	fd   int
	mu   sync.Mutex // guards what follows
	due  waiters
	shut bool
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
	if s.start() == nil {
		ch := make(chan struct{})
		s.mu.Lock()
		heap.Push(&s.due, waiter{at: aim, ch: ch})
		if s.due[0].ch == ch {
			s.arm()
		}
		s.mu.Unlock()
		<-ch
	} else {
		nanosleep(wait)
	}
	late := min(max(time.Since(aim), 0), lateCap)
	old := s.late.Load()
	s.late.Store(old + (int64(late)-old)/32)
}

// start creates the timer and its reader, once.
func (s *sleeper) start() error {
	s.once.Do(func() {
		s.fd, s.err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
		if s.err == nil {
			go s.run()
		}
	})
	return s.err
}

// run wakes the sleeps that are due each time the timer fires, until
// close.
func (s *sleeper) run() {
	runtime.LockOSThread() // the thread is the timer's: never handed back
	var buf [8]byte        // the count of expirations
	for {
		if _, err := unix.Read(s.fd, buf[:]); err != nil && err != unix.EINTR {
			return
		}
		now := time.Now()
		s.mu.Lock()
		if s.shut {
			unix.Close(s.fd)
			s.mu.Unlock()
			return
		}
		for len(s.due) > 0 && !s.due[0].at.After(now) {
			close(heap.Pop(&s.due).(waiter).ch)
		}
		s.arm()
		s.mu.Unlock()
	}
}

// arm sets the timer for the earliest sleep, or disarms it. s.mu held.
func (s *sleeper) arm() {
	var spec unix.ItimerSpec
	if len(s.due) > 0 {
		// A zero time disarms the timer: a sleep due now waits 1 ns.
		spec.Value = unix.NsecToTimespec(int64(max(time.Until(s.due[0].at), 1)))
	}
	_ = unix.TimerfdSettime(s.fd, 0, &spec, nil)
}

// close stops the timer's thread (a close of the fd would not wake its
// read: the timer fires now instead). No sleep may be under way.
func (s *sleeper) close() {
	if s.start() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shut = true
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(1)}
	_ = unix.TimerfdSettime(s.fd, 0, &spec, nil)
}

// nanosleep sleeps for d on a thread of its own with a timer slack of
// 1 ns, for a process that cannot have a timerfd.
func nanosleep(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(d))
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}

// waiter is a sleep: its goroutine waits for ch to close at at.
type waiter struct {
	at time.Time
	ch chan struct{}
}

// waiters is a heap of sleeps, the earliest first.
type waiters []waiter

func (w waiters) Len() int           { return len(w) }
func (w waiters) Less(i, j int) bool { return w[i].at.Before(w[j].at) }
func (w waiters) Swap(i, j int)      { w[i], w[j] = w[j], w[i] }
func (w *waiters) Push(x any)        { *w = append(*w, x.(waiter)) }
func (w *waiters) Pop() any {
	old := *w
	x := old[len(old)-1]
	*w = old[:len(old)-1]
	return x
}
