package probe

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// modelDisk is an engine over a model of a disk: each read takes lat in
// the device, which serves par reads at once (the rest wait in flight).
// It answers at once with what the disk would have done, and counts its
// runs.
type modelDisk struct {
	lat  time.Duration
	par  int
	jobs []int // each run's depth
}

func (m *modelDisk) Name() string { return "model" }

func (m *modelDisk) Run(ctx context.Context, j *Job) (*Sample, error) {
	m.jobs = append(m.jobs, j.Depth)
	// A read at depth d waits for d/par reads before it.
	each := m.lat * time.Duration(max(1, (j.Depth+m.par-1)/m.par))
	s := &Sample{WorkerRuns: -1}
	if j.Offsets != nil { // a fixed number of reads, one at a time
		next := j.Offsets(0)
		for _, ok := next(); ok && s.Elapsed+each <= time.Until(j.Deadline); _, ok = next() {
			s.Reads++
			s.Elapsed += each
			s.Latencies = append(s.Latencies, uint32(each))
		}
		return s, nil
	}
	// Until the deadline, then the reads in flight drain.
	s.Elapsed = time.Until(j.Deadline) + each
	s.Reads = int64(s.Elapsed / m.lat * time.Duration(min(j.Depth, m.par)))
	for range s.Reads {
		s.Latencies = append(s.Latencies, uint32(each))
	}
	return s, nil
}

func sized(t *testing.T, m *modelDisk, o Options) (shape, error) {
	t.Helper()
	o.fill()
	var said []string
	s, err := sizeDisk(context.Background(), m, -1, 64<<20, o, 0, func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }, func(time.Duration) {})
	t.Log(said)
	return s, err
}

// TestSizeSerialDisk: a disk serving one read at a time, 5 ms each: its
// IOPS does not grow past depth 1, so the default probe drops the depths
// past 4 (the first flat point), measures its deep queue at 4, and counts
// each point's drain: 4 reads of 5 ms. Its grace scales too: 32 reads in
// flight at 20 ms take 640 ms to drain, which is no dead disk.
func TestSizeSerialDisk(t *testing.T) {
	t.Parallel()
	m := &modelDisk{lat: 5 * time.Millisecond, par: 1}
	o := DefaultOptions()
	s, err := sized(t, m, o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.depths, []int{1, 4}) || s.deep != 4 || s.flatAt != 4 || !slices.Equal(s.dropped, []int{16, 32, 64}) {
		t.Errorf("depths %v deep %d flat at %d dropped %v, want 1, 4; 4; 4; 16, 32, 64", s.depths, s.deep, s.flatAt, s.dropped)
	}
	if d := s.drainOf(4); d < 4*m.lat {
		t.Errorf("drain counted at depth 4: %s, less than 4 reads of %s", d, m.lat)
	}
	o.fill()
	all := budgetFor(o, shape{lat: m.lat, latMax: m.lat, depths: o.Depths, deep: o.Depth}, 2, 0)
	// Below the budget with every depth; above the measurements left,
	// 3 rounds x 2 candidates x 2 depths.
	if b := budgetFor(o, s, 2, 0); b >= all || b < 12*o.Duration {
		t.Errorf("budget %s with the flat depths dropped, %s with all", b, all)
	}

	slow := &modelDisk{lat: 20 * time.Millisecond, par: 1}
	o.Depths, o.Depth, o.Duration, o.Rounds = []int{1, 32}, 32, time.Second, 1
	s, err = sized(t, slow, o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.depths, []int{1, 32}) || s.deep != 32 || len(s.dropped) != 0 {
		t.Errorf("depths %v deep %d dropped %v, want 1, 32 kept (the first flat point)", s.depths, s.deep, s.dropped)
	}
	if g := s.graceOf(32); g <= 32*slow.lat || s.drainOf(32) < 32*slow.lat {
		t.Errorf("grace %s, drain %s at depth 32: 32 reads of %s take %s", g, s.drainOf(32), slow.lat, 32*slow.lat)
	}
}

// TestSizeParallelDisk: a disk serving 128 reads at once, 1 ms each: IOPS
// grows at every depth, so the ramp (draining 64 could cost a serial
// disk 64 ms) drops nothing.
func TestSizeParallelDisk(t *testing.T) {
	t.Parallel()
	m := &modelDisk{lat: time.Millisecond, par: 128}
	o := DefaultOptions()
	s, err := sized(t, m, o)
	if err != nil {
		t.Fatal(err)
	}
	o.fill()
	if !s.ramped || !slices.Equal(s.depths, o.Depths) || s.deep != o.Depth || len(s.dropped) != 0 {
		t.Errorf("ramped %v depths %v deep %d dropped %v, want every depth kept", s.ramped, s.depths, s.deep, s.dropped)
	}
}

// TestSizeFastDisk: on a disk whose reads take 20 µs, draining costs
// nothing worth a ramp: only the depth-1 reads are made.
func TestSizeFastDisk(t *testing.T) {
	t.Parallel()
	m := &modelDisk{lat: 20 * time.Microsecond, par: 1}
	s, err := sized(t, m, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if s.ramped || len(m.jobs) != 1 || s.graceOf(64) != hangGrace {
		t.Errorf("ramped %v, %d runs, grace %s", s.ramped, len(m.jobs), s.graceOf(64))
	}
}

// TestSizeTooShort: a measurement shorter than two reads of the disk is
// refused, saying which option to change and to what; that value works.
func TestSizeTooShort(t *testing.T) {
	t.Parallel()
	m := &modelDisk{lat: 20 * time.Millisecond, par: 1}
	o := DefaultOptions()
	o.Duration = 30 * time.Millisecond
	_, err := sized(t, m, o)
	if err == nil || !strings.Contains(err.Error(), "--duration") || !strings.Contains(err.Error(), "duration in [rule.probe]") {
		t.Fatalf("err = %v", err)
	}
	got := regexp.MustCompile(`at least (\S+) `).FindStringSubmatch(err.Error())
	if got == nil {
		t.Fatalf("no value in %v", err)
	}
	if o.Duration, err = time.ParseDuration(got[1]); err != nil || o.Duration > probeopt.MaxDuration {
		t.Fatalf("suggested %q: %v", got[1], err)
	}
	if _, err := sized(t, m, o); err != nil {
		t.Errorf("with the duration suggested, %s: %v", o.Duration, err)
	}

	// Reads slower than the depth-1 measurement allows: too slow.
	if _, err := sized(t, &modelDisk{lat: 300 * time.Millisecond, par: 1}, DefaultOptions()); err == nil || !strings.Contains(err.Error(), "too slow") {
		t.Errorf("300 ms a read: err = %v", err)
	}
	// No read at all: a disk that does not answer.
	if _, err := sized(t, &modelDisk{lat: time.Hour, par: 1}, DefaultOptions()); !errors.Is(err, ErrStuck) {
		t.Errorf("no read back: err = %v, want ErrStuck", err)
	}
}

// TestFitThreads: a psync probe at depth 64 of a binary linked with cgo,
// with 1670 MiB of 1953 MiB in use (ulimit -v 2000000, measured), cannot
// have its threads: the error names the limit and the other engine. Where
// a lower depth fits, it is said, and it fits.
func TestFitThreads(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	err := fitThreads(1670*mb, 2048000000, 8, 64, 8*mb, 2, true)
	if err == nil || !strings.Contains(err.Error(), "RLIMIT_AS") || !strings.Contains(err.Error(), "--engine io_uring") {
		t.Fatalf("err = %v", err)
	}
	if err := fitThreads(1670*mb, 8<<30, 8, 64, 8*mb, 2, true); err != nil {
		t.Errorf("8 GiB: %v", err)
	}
	if err := fitThreads(1670*mb, 2048000000, 8, 64, 8*mb, 2, false); err != nil {
		t.Errorf("without cgo, threads cost little: %v", err)
	}
	err = fitThreads(1670*mb, 3<<30, 8, 256, 8*mb, 2, true)
	got := regexp.MustCompile(`depths up to (\d+)`).FindStringSubmatch(errString(err))
	if got == nil {
		t.Fatalf("no depth suggested: %v", err)
	}
	var n int
	for _, c := range got[1] {
		n = n*10 + int(c-'0')
	}
	if fitThreads(1670*mb, 3<<30, 8, n, 8*mb, 2, true) != nil || fitThreads(1670*mb, 3<<30, 8, n+1, 8*mb, 2, true) == nil {
		t.Errorf("depth %d suggested: it or one more does not fit as said", n)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSizeFlatPastPool: in a probe that measures other nr_requests, a
// curve that stops growing past the disk's own nr_requests drops no
// depth (the pool may be what flattens it); one flat at or below it is
// the disk's, and drops the depths past it as before.
func TestSizeFlatPastPool(t *testing.T) {
	t.Parallel()
	m := &modelDisk{lat: 5 * time.Millisecond, par: 4} // flat from depth 16 on
	o := DefaultOptions()
	o.fill()
	size := func(pool int) shape {
		s, err := sizeDisk(context.Background(), m, -1, 64<<20, o, pool, func(string, ...any) {}, func(time.Duration) {})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := size(4); len(s.dropped) != 0 || s.deep != o.Depth || !slices.Equal(s.depths, o.Depths) || s.flatAt != 0 {
		t.Errorf("flat past nr_requests 4: depths %v deep %d dropped %v flat at %d; want nothing dropped", s.depths, s.deep, s.dropped, s.flatAt)
	}
	if s := size(16); !slices.Equal(s.dropped, []int{32, 64}) || s.deep != 16 || s.flatAt != 16 {
		t.Errorf("flat at nr_requests 16: depths %v deep %d dropped %v flat at %d; want 32 and 64 dropped", s.depths, s.deep, s.dropped, s.flatAt)
	}
}
