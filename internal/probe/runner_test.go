package probe

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// TestRunnerSeeded: a disk whose key a seeded file has gets that decision
// without probing (the fake tree has no device nodes: a probe would be
// refused), shown as seeded; a disk of another key gets none.
func TestRunnerSeeded(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	vda, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	o := DefaultOptions()
	o.Engine = EnginePsync
	fleet := OpenStore(filepath.Join(dir, "fleet"), nil)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := fleet.Remember(Record{
		Key: KeyOf(fs, vda), Device: "vda", At: at,
		Method:  Method{Engine: EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
		Figures: []Candidate{cand("mq-deadline", []float64{111e3}, []float64{50}), cand("none", []float64{143e3}, []float64{51})},
	}); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dir, "probes.d", "fleet.json")
	if _, err := fleet.Export(seed); err != nil {
		t.Fatal(err)
	}
	r := &Runner{FS: fs, DevDir: filepath.Join(dir, "no-dev"), StateDir: filepath.Join(dir, "state"),
		Store: OpenStore(filepath.Join(dir, "state"), []string{filepath.Join(dir, "probes.d", "*.json")}),
		Now:   func() time.Time { return at.Add(time.Hour) }}
	rep, err := r.Probe(context.Background(), diskName(t, "vda"), o, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Winner != "none" || !strings.HasPrefix(rep.From, "seeded from ") || rep.Original != "mq-deadline" ||
		rep.Provenance != "probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%" {
		t.Errorf("seeded: winner %s from %q original %s provenance %q reason %q", rep.Winner, rep.From, rep.Original, rep.Provenance, rep.Reason)
	}
	// max_age excludes it: then a probe is tried, and refused here.
	if _, err := r.Probe(context.Background(), diskName(t, "vda"), o, false, time.Minute); err == nil {
		t.Error("a result older than max_age was used")
	}
	// --fresh probes whatever is remembered.
	if _, err := r.Probe(context.Background(), diskName(t, "vda"), o, true, 0); err == nil {
		t.Error("fresh: no probe was tried")
	}
	vdb, err := fs.Device("vdb")
	if err != nil {
		t.Fatal(err)
	}
	if KeyOf(fs, vdb) != KeyOf(fs, vda) {
		if rep, _ := r.Lookup(vdb, o, 0); rep != nil {
			t.Errorf("vdb (another key) got vda's result: %+v", rep)
		}
	}
}

// TestRunnerAsksForProcs: a probe through psync asks the runner's owner
// for a goroutine per reader and one more, and gives them back when it
// ends (here refused: the fake tree has no device nodes); the probe never
// sets GOMAXPROCS itself.
func TestRunnerAsksForProcs(t *testing.T) {
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var asked []int
	released := 0
	r := &Runner{FS: fs, DevDir: filepath.Join(dir, "no-dev"), StateDir: filepath.Join(dir, "state"), Store: OpenStore(filepath.Join(dir, "state"), nil),
		Procs: func(n int) func() {
			asked = append(asked, n)
			return func() { released++ }
		}}
	procs := runtime.GOMAXPROCS(0)
	o := DefaultOptions()
	o.Engine, o.Depth, o.Depths = EnginePsync, 8, []int{1, 4}
	if _, err := r.Probe(context.Background(), diskName(t, "vda"), o, true, 0); err == nil {
		t.Fatal("a probe without a device node was not refused")
	}
	if !slices.Equal(asked, []int{9}) || released != 1 {
		t.Errorf("psync depth 8, depths 1, 4: asked for %v, released %d times; want [9], once", asked, released)
	}
	// The curve's deepest point, when deeper, is what counts.
	asked, released = nil, 0
	o.Depths = []int{1, 16}
	r.Probe(context.Background(), diskName(t, "vda"), o, true, 0)
	if !slices.Equal(asked, []int{17}) || released != 1 {
		t.Errorf("psync depth 8, depths 1, 16: asked for %v, released %d times; want [17], once", asked, released)
	}
	o.Depths = []int{1, 4}
	if runtime.GOMAXPROCS(0) != procs {
		t.Errorf("GOMAXPROCS %d after the probe, was %d", runtime.GOMAXPROCS(0), procs)
	}
	if _, err := newUringEngine(); err != nil {
		t.Skipf("io_uring not available here: %v", err)
	}
	asked = nil
	o.Engine = EngineIOUring
	r.Probe(context.Background(), diskName(t, "vda"), o, true, 0)
	if len(asked) != 0 {
		t.Errorf("io_uring asked for %v goroutines; it reads from one", asked)
	}
}

// TestRunnerFlatResult: a result measured on a disk whose IOPS stopped
// growing at depth 4, recorded with the depths it measured (1 and 4, deep
// 4) and FlatAt 4, serves the lookup of the depths asked (1, 4, 16, 64,
// deep 32), so the disk is not probed again; the same depths recorded
// without FlatAt (asked so) do not.
func TestRunnerFlatResult(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	vda, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Engine = EnginePsync
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, flat := range []int{4, 0} {
		dir := t.TempDir()
		r := &Runner{FS: fs, DevDir: filepath.Join(dir, "no-dev"), StateDir: dir, Store: OpenStore(dir, nil),
			Now: func() time.Time { return at.Add(time.Hour) }}
		if err := r.Store.Remember(Record{
			Key: KeyOf(fs, vda), Device: "vda", At: at, FlatAt: flat,
			Method:  Method{Engine: EnginePsync, Depth: 4, Depths: []int{1, 4}, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
			Figures: []Candidate{cand("mq-deadline", []float64{150}, []float64{5e3}), cand("none", []float64{160}, []float64{5e3})},
		}); err != nil {
			t.Fatal(err)
		}
		rep, err := r.Lookup(vda, o, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case flat != 0 && (rep == nil || rep.FlatAt != flat || rep.Depth != 4 || !slices.Equal(rep.Depths, []int{1, 4})):
			t.Errorf("flat at %d: lookup of the depths asked found %+v", flat, rep)
		case flat == 0 && rep != nil:
			t.Errorf("depths 1, 4 asked so served a lookup of 1, 4, 16, 64: %+v", rep)
		}
	}
}

// A lookup of remembered results needs the engine's name only: it sets up
// no engine (for io_uring, a ring). Not parallel: it swaps the engine
// table, which the parallel tests, run after it, read.
func TestLookupSetsUpNoEngine(t *testing.T) {
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	saved := slices.Clone(engines)
	t.Cleanup(func() { engines = saved })
	for i := range engines {
		engines[i].new = func() (Engine, error) {
			t.Errorf("a lookup set up the %s engine", engines[i].name)
			return nil, errors.New("not in this test")
		}
	}
	state := t.TempDir()
	r := &Runner{FS: fs, StateDir: state, Store: OpenStore(state, nil)}
	o := Options{Options: probeopt.Options{Candidates: []string{"none", "mq-deadline"}, Engine: EngineIOUring}}
	if rep, err := r.Lookup(dev, o, 0); rep != nil || err != nil {
		t.Errorf("lookup in an empty store: %+v, %v; want nothing found", rep, err)
	}
}

// diskName is the checked name of a disk a test probes.
func diskName(t testing.TB, name string) sysfs.Name {
	t.Helper()
	n, err := sysfs.ParseName(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
