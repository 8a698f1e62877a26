// Command loopbench is the Go half of contrib/bench/run.sh: it creates and
// removes the benchmark's loop devices, switches their schedulers directly
// (the raw limit), times how long a daemon (iosched, udevd) takes to bring
// hot-plugged loops to a scheduler, waits for sd_notify READY=1, and prints
// the final table; for `run.sh compare` it also times a sequential writer
// and loops already present (tuned), measures what one process run costs,
// and draws the comparison figure.
//
// It touches only loop devices in [first, first+count), and run.sh only ever
// passes numbers in 40000-41999.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/looptest"
)

// The only loop numbers this tool will touch: defaultBase to
// defaultBase+1999, or from IOSCHED_BENCH_BASE (a multiple of 2000, so that
// run.sh's globs can name the range) when a loop of the default range is
// stuck in the kernel on this machine.
const (
	defaultBase = 40000
	rangeSize   = 2000
)

// benchRange is the loop numbers this tool may touch.
func benchRange() (lo, hi int, err error) {
	lo = defaultBase
	if s := os.Getenv("IOSCHED_BENCH_BASE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10000 || n+rangeSize-1 > 99999 || n%rangeSize != 0 {
			return 0, 0, fmt.Errorf("IOSCHED_BENCH_BASE=%q: want a multiple of %d from 10000 to %d", s, rangeSize, 99999-rangeSize+1)
		}
		lo = n
	}
	return lo, lo + rangeSize - 1, nil
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "raw":
		err = cmdRaw(args)
	case "rawhotplug":
		err = cmdRawHotplug(args)
	case "hotplug":
		err = cmdHotplug(args)
	case "remove":
		err = cmdRemove(args)
	case "count":
		err = cmdCount(args)
	case "uevent":
		err = cmdUevent(args)
	case "waitready":
		err = cmdWaitReady(args)
	case "idle":
		err = cmdIdle(args)
	case "touch":
		err = cmdTouch(args)
	case "logspan":
		err = cmdLogSpan(args)
	case "jget":
		err = cmdJget(args)
	case "report":
		err = cmdReport(args)
	case "create":
		err = cmdCreate(args)
	case "seq":
		err = cmdSeq(args)
	case "watch":
		err = cmdWatch(args)
	case "execcost":
		err = cmdExecCost(args)
	case "compare":
		err = cmdCompare(args)
	case "bind":
		err = cmdBind(args)
	case "seed":
		err = cmdSeed(args)
	case "adaptive":
		err = cmdAdaptive(args)
	case "unbind":
		err = cmdUnbind(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loopbench %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: loopbench raw|rawhotplug|hotplug|remove|count|uevent|waitready|idle|touch|logspan|jget|report|create|seq|watch|execcost|compare|bind|unbind|seed|adaptive [flags]")
	os.Exit(2)
}

// loopRange holds the flags every loop command takes.
type loopRange struct{ first, count int }

func (r *loopRange) flags(fs *flag.FlagSet) {
	fs.IntVar(&r.first, "first", 0, "first loop number")
	fs.IntVar(&r.count, "count", 1000, "how many loops")
}

func (r *loopRange) check() error {
	minLoop, maxLoop, err := benchRange()
	if err != nil {
		return err
	}
	if r.count <= 0 || r.first < minLoop || r.first+r.count-1 > maxLoop {
		return fmt.Errorf("loops %d-%d: outside the benchmark's range %d-%d", r.first, r.first+r.count-1, minLoop, maxLoop)
	}
	return nil
}

func (r *loopRange) attr(i int, attr string) string {
	return "/sys/block/loop" + strconv.Itoa(r.first+i) + "/" + attr
}

// create makes every loop of r, one after another (LOOP_CTL_ADD), and stops
// at the first failure: a number already taken belongs to someone else.
func (r *loopRange) create() error {
	for i := range r.count {
		if err := looptest.AddRaw(r.first + i); err != nil {
			return fmt.Errorf("LOOP_CTL_ADD %d: %w", r.first+i, err)
		}
	}
	return nil
}

// readAttr reads a small sysfs file with open, read, close and nothing else.
func readAttr(p string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

func writeAttr(p, v string) error {
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	for {
		_, err := syscall.Write(fd, []byte(v))
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// active reports whether sched is the active scheduler in a scheduler file's
// contents ("none [mq-deadline] kyber").
func active(b []byte, sched string) bool {
	return bytes.Contains(b, []byte("["+sched+"]"))
}

// seqnum reads the kernel's uevent counter. A LOOP_CTL_ADD sends 2 uevents
// (bdi, block): what a measurement saw beyond 2 per loop it created came from
// someone else's devices, a sign of how noisy the machine was.
func seqnum() int64 {
	b, err := os.ReadFile("/sys/kernel/uevent_seqnum")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func foreign(from int64, created int) int64 {
	return max(0, seqnum()-from-2*int64(created))
}

// cpuSeconds is this process's user+system time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func secs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// RawResult is the raw limit: the loops created, then every scheduler file
// written at once, one goroutine (one thread) each.
type RawResult struct {
	Count     int     `json:"count"`
	CreateS   float64 `json:"create_s"`
	WriteS    float64 `json:"write_s"`
	EndToEndS float64 `json:"end_to_end_s"`
	Writes    int     `json:"writes"`
	Failed    int     `json:"failed"`
	Converged int     `json:"converged"`
	// WriteCPUS is the CPU the writes took (user+system, nearly all
	// system: the kernel's side of 1000 switches).
	WriteCPUS float64 `json:"write_cpu_s"`
	// ForeignUevents were sent for other devices during the run.
	ForeignUevents int64 `json:"foreign_uevents"`
}

func cmdRaw(args []string) error {
	fs := flag.NewFlagSet("raw", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler to write")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	seq := seqnum()
	t0 := time.Now()
	if err := r.create(); err != nil {
		return err
	}
	tCreated := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := make(chan struct{})
	for i := range r.count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := writeAttr(r.attr(i, "queue/scheduler"), *sched); err != nil {
				failed.Add(1)
			}
		}()
	}
	cpu0 := cpuSeconds()
	t1 := time.Now()
	close(start)
	wg.Wait()
	t2 := time.Now()
	res := RawResult{Count: r.count, CreateS: secs(tCreated.Sub(t0)), WriteS: secs(t2.Sub(t1)), EndToEndS: secs(t2.Sub(t0))}
	res.WriteCPUS = cpuSeconds() - cpu0
	res.ForeignUevents = foreign(seq, r.count)
	res.Writes = r.count - int(failed.Load())
	res.Failed = int(failed.Load())
	res.Converged = r.converged(*sched)
	return printJSON(res)
}

// RawHotplugResult is the ideal hot-plug reaction: each loop's scheduler
// written by its own goroutine the moment LOOP_CTL_ADD returns, with no
// uevent, no reading and no policy in between; watched by the same poller
// as a daemon's hot-plug (hotplug).
type RawHotplugResult struct {
	Count   int     `json:"count"`
	CreateS float64 `json:"create_s"`
	// WrittenS is when the last write returned; ConvergeS when the
	// poller (as hotplug's) saw the last loop converged.
	WrittenS       float64 `json:"written_s"`
	ConvergeS      float64 `json:"converge_s"`
	Failed         int     `json:"failed"`
	Converged      int     `json:"converged"`
	Reads          int     `json:"reads"`
	CPUS           float64 `json:"cpu_s"`
	ForeignUevents int64   `json:"foreign_uevents"`
}

func cmdRawHotplug(args []string) error {
	fs := flag.NewFlagSet("rawhotplug", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler to write")
	poll := fs.Duration("poll", 5*time.Millisecond, "poll interval of the convergence watch")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	pl := startPoller(r, *sched, *poll, 0)
	seq := seqnum()
	cpu0 := cpuSeconds()
	t0 := time.Now()
	close(pl.start)
	for i := range r.count {
		if err := looptest.AddRaw(r.first + i); err != nil {
			wg.Wait()
			close(pl.stop)
			return fmt.Errorf("LOOP_CTL_ADD %d: %w", r.first+i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := writeAttr(r.attr(i, "queue/scheduler"), *sched); err != nil {
				failed.Add(1)
			}
		}()
	}
	t1 := time.Now()
	wg.Wait()
	t2 := time.Now()
	res := RawHotplugResult{Count: r.count, CreateS: secs(t1.Sub(t0)), WrittenS: secs(t2.Sub(t0)), Failed: int(failed.Load())}
	res.CPUS = cpuSeconds() - cpu0
	select {
	case t3 := <-pl.done:
		res.ConvergeS = secs(t3.Sub(t0))
	case <-time.After(10 * time.Second):
		close(pl.stop)
		time.Sleep(2 * *poll)
	}
	res.Reads = pl.reads
	res.ForeignUevents = foreign(seq, r.count)
	res.Converged = r.converged(*sched)
	return printJSON(res)
}

// converged counts the loops of r whose active scheduler is sched.
func (r *loopRange) converged(sched string) int {
	buf := make([]byte, 4096)
	n := 0
	for i := range r.count {
		if b, err := readAttr(r.attr(i, "queue/scheduler"), buf); err == nil && active(b, sched) {
			n++
		}
	}
	return n
}

// HotplugResult is how long loops took to reach the scheduler, as seen by a
// cheap poller: created while a daemon runs (hot-plug), or all created while
// it is stopped (SIGSTOP) and then all there at once when it resumes (burst).
type HotplugResult struct {
	Count int `json:"count"`
	// Burst: the daemon was stopped during the creation, and the clock
	// starts when it is continued.
	Burst bool `json:"burst"`
	// StartUnixNano is the wall clock the clock starts at: the first
	// LOOP_CTL_ADD, or the SIGCONT of a burst.
	StartUnixNano int64 `json:"start_unix_nano"`
	// CreateS is how long the LOOP_CTL_ADDs took.
	CreateS float64 `json:"create_s"`
	// ConvergeS is from the start to the last loop seen with the
	// scheduler; AfterCreateS from the last LOOP_CTL_ADD (hot-plug only).
	ConvergeS    float64 `json:"converge_s"`
	AfterCreateS float64 `json:"after_create_s"`
	Converged    int     `json:"converged"`
	TimedOut     bool    `json:"timed_out"`
	PollMS       float64 `json:"poll_ms"`
	Polls        int     `json:"polls"`
	Reads        int     `json:"reads"`
	// ForeignUevents were sent for other devices from the first
	// LOOP_CTL_ADD to the end.
	ForeignUevents int64 `json:"foreign_uevents"`
	// MaxChildren is the most child processes of -children PID seen at
	// one poll (udevd's workers), when asked.
	MaxChildren int `json:"max_children,omitempty"`
}

// children counts the child processes of pid's main thread (a
// single-threaded daemon such as udevd forks from it).
func children(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return 0
	}
	return len(strings.Fields(string(b)))
}

func cmdHotplug(args []string) error {
	fs := flag.NewFlagSet("hotplug", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler the daemon should set")
	poll := fs.Duration("poll", 5*time.Millisecond, "poll interval")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	pause := fs.Int("pause", 0, "pid to SIGSTOP while the loops are created and SIGCONT after (a burst)")
	parent := fs.Int("children", 0, "pid whose child processes to count at each poll (the most is reported)")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	res := HotplugResult{Count: r.count, Burst: *pause > 0, PollMS: float64(*poll) / float64(time.Millisecond)}

	pl := startPoller(r, *sched, *poll, *parent)
	done, startPoll, stop := pl.done, pl.start, pl.stop

	var t0, t1 time.Time
	seq := seqnum()
	if *pause > 0 {
		if err := syscall.Kill(*pause, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP %d: %w", *pause, err)
		}
		c0 := time.Now()
		err := r.create()
		res.CreateS = secs(time.Since(c0))
		// Let the process see that it is stopped before the clock starts
		// (SIGSTOP is asynchronous; it is long stopped by now).
		t0 = time.Now()
		t1 = t0
		res.StartUnixNano = t0.UnixNano()
		if cerr := syscall.Kill(*pause, syscall.SIGCONT); cerr != nil {
			return fmt.Errorf("SIGCONT %d: %w", *pause, cerr)
		}
		close(startPoll)
		if err != nil {
			close(stop)
			return err
		}
	} else {
		t0 = time.Now()
		res.StartUnixNano = t0.UnixNano()
		close(startPoll)
		if err := r.create(); err != nil {
			close(stop)
			return err
		}
		t1 = time.Now()
		res.CreateS = secs(t1.Sub(t0))
	}
	select {
	case t2 := <-done:
		res.ConvergeS = secs(t2.Sub(t0))
		if !res.Burst {
			res.AfterCreateS = secs(t2.Sub(t1))
		}
	case <-time.After(*timeout):
		close(stop)
		res.TimedOut = true
		time.Sleep(2 * *poll)
	}
	res.Polls, res.Reads, res.Converged, res.MaxChildren = pl.polls, pl.reads, pl.converged, pl.maxChildren
	res.ForeignUevents = foreign(seq, r.count)
	return printJSON(res)
}

// poller watches loops converge, as a daemon's measurement sees them.
// It walks the loops in creation order and stops at the first one not
// converged yet: each tick costs one read plus one per loop newly
// converged, about count+ticks reads in all, so it takes next to no CPU
// from the daemon being measured. Only the time the last loop converged
// is exact (to one tick); that is the figure wanted. The raw writer that
// writes as it creates runs one too, so that both are watched alike (its
// reads take kernfs's lock, which the creation of the next loop waits
// for).
type poller struct {
	done  chan time.Time // the time the last loop was seen converged
	start chan struct{}  // closed: begin polling
	stop  chan struct{}  // closed: give up
	// Set by the poller's goroutine; read once done or stop returned.
	polls, reads, converged, maxChildren int
}

func startPoller(r loopRange, sched string, every time.Duration, parent int) *poller {
	p := &poller{done: make(chan time.Time, 1), start: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		next := 0
		tick := time.NewTicker(every)
		defer tick.Stop()
		<-p.start
		for {
			p.polls++
			if parent > 0 {
				p.maxChildren = max(p.maxChildren, children(parent))
			}
			for next < r.count {
				p.reads++
				b, err := readAttr(r.attr(next, "queue/scheduler"), buf)
				if err != nil || !active(b, sched) {
					break
				}
				next++
			}
			p.converged = next
			if next == r.count {
				p.done <- time.Now()
				return
			}
			select {
			case <-tick.C:
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

func cmdRemove(args []string) error {
	fs := flag.NewFlagSet("remove", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	par := fs.Int("parallel", 64, "removals at once")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	t0 := time.Now()
	sem := make(chan struct{}, *par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range r.count {
		n := r.first + i
		if _, err := os.Stat("/sys/block/loop" + strconv.Itoa(n)); err != nil {
			continue // never created, or gone already
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := looptest.RemoveRaw(n); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("LOOP_CTL_REMOVE %d: %w", n, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "removed loops %d-%d in %s\n", r.first, r.first+r.count-1, time.Since(t0).Round(time.Millisecond))
	return errors.Join(errs...)
}

// cmdCount prints how many loops of the range exist and how many have sched.
func cmdCount(args []string) error {
	fs := flag.NewFlagSet("count", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	exist, with := 0, 0
	for i := range r.count {
		b, err := readAttr(r.attr(i, "queue/scheduler"), buf)
		if err != nil {
			continue
		}
		exist++
		if active(b, *sched) {
			with++
		}
	}
	fmt.Println(exist, with)
	return nil
}

// cmdUevent writes action to every loop's uevent file (what udevadm trigger
// does), all at once.
func cmdUevent(args []string) error {
	fs := flag.NewFlagSet("uevent", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	action := fs.String("action", "change", "add or change")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	for i := range r.count {
		if err := writeAttr(r.attr(i, "uevent"), *action); err != nil {
			return err
		}
	}
	return nil
}

// cmdWaitReady binds a datagram socket for NOTIFY_SOCKET and returns once a
// message carries READY=1, printing the seconds since it bound.
func cmdWaitReady(args []string) error {
	fs := flag.NewFlagSet("waitready", flag.ExitOnError)
	sock := fs.String("socket", "", "socket path to bind")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	fs.Parse(args)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: *sock}); err != nil {
		return err
	}
	t0 := time.Now()
	tv := syscall.NsecToTimeval(int64(*timeout))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("no READY=1 within %s: %w", *timeout, err)
		}
		for _, line := range bytes.Split(buf[:n], []byte("\n")) {
			if string(line) == "READY=1" {
				fmt.Printf("%.6f\n", time.Since(t0).Seconds())
				return nil
			}
		}
	}
}

// LogSpan is when the daemon's own log says it set the scheduler on the
// benchmark's loops, relative to the first LOOP_CTL_ADD.
type LogSpan struct {
	Sets        int     `json:"sets"`
	FirstSetS   float64 `json:"first_set_s"`
	LastSetS    float64 `json:"last_set_s"`
	OtherWrites int     `json:"other_lines"`
}

// cmdLogSpan reads an iosched text log (slog: time=... msg=set device=...)
// and reports the first and last "set" of a loop in the range.
func cmdLogSpan(args []string) error {
	fs := flag.NewFlagSet("logspan", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	logf := fs.String("log", "", "daemon log file")
	since := fs.Int64("since", 0, "unix nanoseconds of the first create")
	fs.Parse(args)
	b, err := os.ReadFile(*logf)
	if err != nil {
		return err
	}
	t0 := time.Unix(0, *since)
	var res LogSpan
	var first, last time.Time
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := fields(line)
		if f["msg"] != "set" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f["device"], "loop"))
		if err != nil || n < r.first || n >= r.first+r.count || f["attribute"] != "scheduler" {
			res.OtherWrites++
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f["time"])
		if err != nil {
			return fmt.Errorf("log time %q: %w", f["time"], err)
		}
		res.Sets++
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if res.Sets > 0 {
		res.FirstSetS = secs(first.Sub(t0))
		res.LastSetS = secs(last.Sub(t0))
	}
	return printJSON(res)
}

// fields splits a slog text line into its key=value pairs (values may be
// quoted).
func fields(line []byte) map[string]string {
	out := map[string]string{}
	s := string(line)
	for len(s) > 0 {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			if q, err := strconv.QuotedPrefix(s); err == nil {
				val, _ = strconv.Unquote(q)
				s = s[len(q):]
			} else {
				val, s = s, ""
			}
		} else if sp := strings.IndexByte(s, ' '); sp >= 0 {
			val, s = s[:sp], s[sp:]
		} else {
			val, s = s, ""
		}
		out[key] = val
	}
	return out
}
