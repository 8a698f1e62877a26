package probe

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seedRecord is a valid seeded result of a disk like vdb.
func seedRecord(device string, at time.Time) Record {
	return Record{
		Key:    Key{Class: "virtio", Driver: "virtio_blk", HWQueues: 1, QueueDepth: 256, SizeBytes: 1 << 30, Kernel: "6.18.0"},
		Device: device, At: at,
		Method:  Method{Engine: EngineIOUring, Depth: 32, BlockSize: 4096, Candidates: []string{"none", "mq-deadline"}},
		Figures: []Candidate{cand("mq-deadline", []float64{111e3}, []float64{50}), cand("none", []float64{143e3}, []float64{50})},
	}
}

// A seeded result that names a scheduler no kernel has, or carries a
// figure no disk measures, is refused when the file is read, with the
// file, the result's place and its device named; so is a file that does
// not decode (truncated, a NaN) after the results before the fault, and
// a FIFO, at once. The valid results are kept. Before, "frobnicate" and
// 1e308 IOPS were taken, and advise recommended frobnicate.
func TestSeedsRefuseImplausibleResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	good := seedRecord("vda", now.Add(-time.Hour))
	frob := seedRecord("vdf", now.Add(-time.Hour))
	frob.Candidates = []string{"none", "frobnicate"}
	frob.Figures[0].Scheduler = "frobnicate"
	huge := seedRecord("vdh", now.Add(-time.Hour))
	huge.Figures[1].IOPS = 1e308
	deep := seedRecord("vdd", now.Add(-time.Hour))
	deep.Depth = 1 << 20
	curve := seedRecord("vdc", now.Add(-time.Hour))
	curve.Depths = []int{1, 4}
	for i := range curve.Figures {
		curve.Figures[i].Curve = []CurvePoint{{Depth: 1, ObservedDepth: 1, IOPS: 10}, {Depth: 4, ObservedDepth: 1e9, IOPS: 40}}
	}
	writeSeed(t, filepath.Join(dir, "a.json"), good, frob, huge, deep, curve)

	// Truncated after its first result, and one with a NaN (which JSON
	// cannot hold: a file with one is not JSON).
	b, err := json.Marshal(storeFile{Version: storeVersion, Results: []Record{seedRecord("vdt", now.Add(-time.Hour)), seedRecord("vdu", now.Add(-time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.LastIndex(string(b), `"device":"vdu"`)
	if err := os.WriteFile(filepath.Join(dir, "b.json"), b[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	nan := strings.Replace(string(b), `"iops":143000`, `"iops":NaN`, 1)
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(nan), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "d.json"), 0o644); err != nil {
		t.Fatal(err)
	}

	s := NewSeeds([]string{filepath.Join(dir, "*.json")})
	s.now = func() time.Time { return now }
	done := make(chan struct{})
	var files []SeededFile
	go func() {
		defer close(done)
		files, err = s.Files()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("reading the seeds waits on the FIFO")
	}
	var kept []string
	for _, f := range files {
		for _, r := range f.Results {
			kept = append(kept, filepath.Base(f.Path)+":"+r.Device)
		}
	}
	if strings.Join(kept, " ") != "a.json:vda b.json:vdt" {
		t.Errorf("kept %v, want a.json:vda b.json:vdt", kept)
	}
	if files[0].Results[0].Entry != 1 {
		t.Errorf("entry %d, want 1", files[0].Results[0].Entry)
	}
	a, bj, c, d := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json"), filepath.Join(dir, "c.json"), filepath.Join(dir, "d.json")
	for _, want := range []string{
		a + `: result 2 (device vdf): not used: candidate "frobnicate" is not a scheduler (known: "none", "mq-deadline", "kyber", "bfq")`,
		a + ": result 3 (device vdh): not used: none: iops 1e+308 is outside 0..1e+08",
		a + ": result 4 (device vdd): not used: depth 1048576 is outside 1..1024",
		a + ": result 5 (device vdc): not used: mq-deadline's curve: at depth 4: observed_depth 1e+09 is outside 0..10240",
		bj + ": result 2 (at byte ",
		c + ": result 1 (at byte ",
		d + ": not a regular file (a FIFO)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := len(SplitErrors(err)); n != 7 {
		t.Errorf("%d errors, want 7 (one a result or file):\n%v", n, err)
	}
}

// Record.Check refuses figures that are not finite, wherever they are.
func TestCheckRefusesNonFiniteFigures(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for name, set := range map[string]func(*Record){
		"NaN IOPS":          func(r *Record) { r.Figures[0].IOPS = math.NaN() },
		"infinite p99":      func(r *Record) { r.Figures[1].P99us = math.Inf(1) },
		"negative QD1 IOPS": func(r *Record) { r.Figures[1].QD1IOPS = -1 },
		"NaN in a round":    func(r *Record) { r.Figures[0].Rounds[0].P50us = math.NaN() },
		"NaN duration":      func(r *Record) { r.DurationS = math.NaN() },
		"a winner unknown":  func(r *Record) { r.Winner = "frobnicate" },
	} {
		r := seedRecord("vda", now.Add(-time.Hour))
		set(&r)
		if err := r.Check(now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := seedRecord("vda", now.Add(-time.Hour))
	if err := r.Check(now); err != nil {
		t.Errorf("a valid result refused: %v", err)
	}
}

// Stores that share seeds share probes.json as decoded while it stays the
// same file, and see a result remembered since (a new file).
func TestSharedStoreSeesRememberedResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seeds := NewSeeds(nil)
	now := time.Now().UTC()
	rec := seedRecord("vdb", now.Add(-time.Hour))
	want := Want{Method: rec.Method, Choose: ChooseIOPS, Margin: 0.05, Incumbent: "mq-deadline"}
	if r, err := NewStore(dir, seeds).Lookup(rec.Key, want, now); r != nil || err != nil {
		t.Fatalf("empty: %v, %v", r, err)
	}
	if err := OpenStore(dir, nil).Remember(rec); err != nil {
		t.Fatal(err)
	}
	r, err := NewStore(dir, seeds).Lookup(rec.Key, want, now)
	if err != nil || r == nil || r.Device != "vdb" || r.Winner != "none" {
		t.Fatalf("after Remember: %v, %v", describe(r), err)
	}
	// The record returned is a copy: the next lookup decides afresh.
	r.Figures = nil
	want.Choose = ChooseBalanced
	if r, _ := NewStore(dir, seeds).Lookup(rec.Key, want, now); r == nil || len(r.Figures) != 2 || r.Choose != ChooseBalanced {
		t.Errorf("a second lookup: %v", describe(r))
	}
}
