package probe

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// watched is one measurement as the test saw it from outside the probe:
// the scheduler the disk ran, the depth asked, and the disk's mean
// requests in flight from its own stat, read by the test just before and
// after the engine ran, over the wall-clock time between the two reads.
type watched struct {
	sched    string
	depth    int
	inFlight float64
}

// statWatcher is an engine that reads the disk's stat around each
// measurement of the real one it wraps, with a parser of its own.
type statWatcher struct {
	Engine
	t    *testing.T
	name string
	mu   sync.Mutex
	seen []watched
}

func (w *statWatcher) timeInQueue() (ms float64) {
	b, err := os.ReadFile("/sys/block/" + w.name + "/stat")
	if err != nil {
		w.t.Error(err)
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 11 {
		w.t.Errorf("stat %q: fewer than 11 fields", b)
		return 0
	}
	n, err := strconv.ParseFloat(f[10], 64) // Documentation/block/stat.rst: time_in_queue
	if err != nil {
		w.t.Error(err)
	}
	return n
}

func (w *statWatcher) Run(ctx context.Context, j *Job) (*Sample, error) {
	sched, err := os.ReadFile("/sys/block/" + w.name + "/queue/scheduler")
	if err != nil {
		w.t.Error(err)
	}
	active := strings.Fields(string(sched))
	for _, s := range active {
		if strings.HasPrefix(s, "[") {
			active = []string{strings.Trim(s, "[]")}
		}
	}
	before, start := w.timeInQueue(), time.Now()
	s, err := w.Engine.Run(ctx, j)
	after, elapsed := w.timeInQueue(), time.Since(start)
	w.mu.Lock()
	w.seen = append(w.seen, watched{sched: active[0], depth: j.Depth, inFlight: (after - before) / (float64(elapsed) / float64(time.Millisecond))})
	w.mu.Unlock()
	return s, err
}

// TestIntegrationProbeCurve probes a /dev/shm loop device at three depths:
// each candidate's curve has a point per depth, in each round and in the
// medians; each point's observed depth is what the disk's stat, read by
// the test around that measurement, says was in flight; the depth-1
// figures are the curve's depth-1 measurement; and the curve survives
// being remembered, exported and seeded on another machine, read back
// through the store.
func TestIntegrationProbeCurve(t *testing.T) {
	looptest.Require(t)
	fs := liveFS(t)
	l := looptest.Add(t, 7306)
	l.Bind(t, 64<<20)
	startFrom(t, fs, l.Name)
	state := t.TempDir()
	locks := testLocks(t)
	eng, err := NewEngine("")
	if err != nil {
		t.Fatal(err)
	}
	w := &statWatcher{Engine: eng, t: t, name: l.Name}
	depths := []int{1, 4, 16}
	o := Options{Options: probeopt.Options{Candidates: []string{"none", "mq-deadline"}, Duration: 150 * time.Millisecond, Rounds: 2, Depth: 8, Depths: depths}}
	rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name), engine: w}, o, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Depths, depths) {
		t.Errorf("report depths %v, want %v (a loop device's 128 tags cap nothing here)", rep.Depths, depths)
	}
	// Per candidate, the measurements the watcher saw, by depth, in
	// order: a warm-up and the deep-queue one at 8, one at each other
	// depth, per round.
	byDepth := map[string]map[int][]watched{}
	for _, m := range w.seen {
		if byDepth[m.sched] == nil {
			byDepth[m.sched] = map[int][]watched{}
		}
		byDepth[m.sched][m.depth] = append(byDepth[m.sched][m.depth], m)
	}
	// The probe divides by the engine's own elapsed time, the watcher by
	// the time between its two reads of stat around the measurement: on a
	// loaded machine the two windows differ by a little, never by a tenth.
	close := func(probe, test float64) bool { return math.Abs(probe-test) <= 0.05+0.10*test }
	for _, c := range rep.Candidates {
		if got := pointDepths(c.Curve); !slices.Equal(got, depths) {
			t.Errorf("%s: median curve at depths %v, want %v", c.Scheduler, got, depths)
		}
		if len(c.Rounds) != 2 {
			t.Fatalf("%s: %d rounds", c.Scheduler, len(c.Rounds))
		}
		for i, rf := range c.Rounds {
			if got := pointDepths(rf.Curve); !slices.Equal(got, depths) {
				t.Errorf("%s round %d: curve at depths %v, want %v", c.Scheduler, rf.Round, got, depths)
				continue
			}
			for _, p := range rf.Curve {
				ms := byDepth[c.Scheduler][p.Depth]
				if len(ms) != 2 {
					t.Fatalf("%s: the watcher saw %d measurements at depth %d, want one a round", c.Scheduler, len(ms), p.Depth)
				}
				test := ms[i].inFlight
				if !close(p.ObservedDepth, test) {
					t.Errorf("%s round %d depth %d: observed depth %.3f, the disk's stat read around it says %.3f", c.Scheduler, rf.Round, p.Depth, p.ObservedDepth, test)
				}
				// Busy, and never more in flight than the reader kept.
				if p.IOPS <= 0 || p.P50us <= 0 || p.P99us < p.P50us || p.ObservedDepth <= 0.05 || p.ObservedDepth > float64(p.Depth)*1.05+0.05 {
					t.Errorf("%s round %d: implausible point %+v", c.Scheduler, rf.Round, p)
				}
			}
			if rf.Curve[0].IOPS != rf.QD1IOPS || rf.Curve[0].P99us != rf.QD1P99 {
				t.Errorf("%s round %d: depth-1 figures %v IOPS p99 %v, the curve's depth-1 point %+v: want one measurement", c.Scheduler, rf.Round, rf.QD1IOPS, rf.QD1P99, rf.Curve[0])
			}
		}
		if n := len(byDepth[c.Scheduler][8]); n != 4 {
			t.Errorf("%s: %d measurements at depth 8, want a warm-up and the deep-queue one a round", c.Scheduler, n)
		}
	}

	// Remembered, exported and seeded on another machine: read back
	// through the store, the curves are the probe's.
	store := OpenStore(state, nil)
	if err := store.Remember(RecordOf(rep, time.Now())); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(t.TempDir(), "fleet.json")
	if n, err := store.Export(exp); err != nil || n != 1 {
		t.Fatalf("export: %d, %v", n, err)
	}
	other := t.TempDir()
	r := &Runner{FS: fs, StateDir: other, Store: OpenStore(other, []string{exp})}
	dev, err := fs.Device(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	seeded, err := r.Lookup(dev, o, 0)
	if err != nil || seeded == nil || !strings.HasPrefix(seeded.From, "seeded from "+exp) {
		t.Fatalf("seeded lookup: %+v, %v", seeded, err)
	}
	if !slices.Equal(seeded.Depths, depths) || len(seeded.Candidates) != len(rep.Candidates) {
		t.Fatalf("seeded: depths %v, %d candidates", seeded.Depths, len(seeded.Candidates))
	}
	for i, c := range seeded.Candidates {
		if want := rep.Candidates[i]; c.Scheduler != want.Scheduler || !slices.Equal(c.Curve, want.Curve) {
			t.Errorf("seeded %s curve %+v, probed %s %+v", c.Scheduler, c.Curve, want.Scheduler, want.Curve)
		}
	}
	// Asked for another curve, the seeded result is not it.
	o2 := o
	o2.Depths = []int{1, 2}
	if rep, err := r.Lookup(dev, o2, 0); rep != nil || err != nil {
		t.Errorf("depths 1, 2 found the seeded 1, 4, 16: %+v, %v", rep, err)
	}

	// Depths past the disk's hardware tags (a loop device has 128) are
	// measured at its tag count, said before starting.
	t.Run("capped", func(t *testing.T) {
		o := Options{Options: probeopt.Options{Candidates: []string{"none", "mq-deadline"}, Duration: 30 * time.Millisecond, Rounds: 1, Depth: 4,
			Depths: []int{1, 256, 512}, Engine: EngineIOUring}}
		var said []string
		rep, err := Run(context.Background(), Target{FS: fs, StateDir: state, Locks: locks, Name: diskName(t, l.Name)}, o, func(s string) { said = append(said, s) })
		if err != nil {
			t.Fatal(err)
		}
		tags, err := os.ReadFile("/sys/block/" + l.Name + "/mq/0/nr_tags")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(tags)))
		if n >= 256 {
			t.Skipf("%s has %d tags: nothing to cap", l.Name, n)
		}
		want := []int{1, n}
		if !slices.Equal(rep.Depths, want) {
			t.Errorf("depths %v, want %v", rep.Depths, want)
		}
		for _, c := range rep.Candidates {
			if !slices.Equal(pointDepths(c.Curve), want) {
				t.Errorf("%s: curve %+v, want points at %v", c.Scheduler, c.Curve, want)
			}
		}
		// Said in the line that announces the bound, once the disk
		// is sized, before the first switch.
		i := slices.IndexFunc(said, func(s string) bool { return strings.HasPrefix(s, "probing ") })
		if i < 0 || !strings.Contains(said[i], "capped at the disk's "+strconv.Itoa(n)+" hardware tags") {
			t.Errorf("%q: the line announcing the bound does not say the depths were capped", said)
		}
	})
}

func pointDepths(pts []CurvePoint) []int {
	out := make([]int, len(pts))
	for i, p := range pts {
		out[i] = p.Depth
	}
	return out
}
