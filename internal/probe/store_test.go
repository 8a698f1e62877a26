package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

func TestStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := OpenStore(filepath.Join(dir, "state"), []string{filepath.Join(dir, "seeded", "*.json")})
	key := Key{Class: "virtio", Driver: "virtio_blk", HWQueues: 1, QueueDepth: 256, SizeBytes: 1 << 30, Kernel: "6.18.0"}
	method := Method{Engine: EngineIOUring, Depth: 32, BlockSize: 4096, Candidates: []string{"none", "mq-deadline"}}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	figs := []Candidate{
		cand("mq-deadline", []float64{111e3, 111e3, 111e3}, []float64{50, 50, 50}),
		cand("none", []float64{143e3, 143e3, 143e3}, []float64{57, 57, 57}), // +29% IOPS, depth-1 p99 +14%
	}
	want := Want{Method: method, Choose: ChooseBalanced, Margin: 0.05, Incumbent: "mq-deadline"}

	if r, err := s.Lookup(key, want, t0); r != nil || err != nil {
		t.Fatalf("empty store: %+v, %v", r, err)
	}
	rec := Record{Key: key, Serial: "S1", Device: "vdb", At: t0, Method: method, Figures: figs, Incumbent: "mq-deadline"}
	if err := s.Remember(rec); err != nil {
		t.Fatal(err)
	}

	// Same key, another serial: the same result. The decision is made
	// again for the choice asked: balanced keeps mq-deadline (depth-1
	// regression), iops takes none.
	r, err := s.Lookup(key, want, t0.Add(time.Hour))
	if err != nil || r == nil || r.Winner != "mq-deadline" || r.Seeded != "" {
		t.Fatalf("balanced lookup: %+v, %v", r, err)
	}
	iops := want
	iops.Choose = ChooseIOPS
	if r, _ := s.Lookup(key, iops, t0); r == nil || r.Winner != "none" || !strings.Contains(r.Provenance, "+29%") {
		t.Fatalf("iops lookup: %+v", r)
	}
	// Candidates in another order are the same method.
	swapped := want
	swapped.Candidates = []string{"mq-deadline", "none"}
	if r, _ := s.Lookup(key, swapped, t0); r == nil {
		t.Error("candidates in another order: not found")
	}

	// A changed key, another method, or too old: nothing.
	other := key
	other.Kernel = "6.19.0"
	if r, _ := s.Lookup(other, want, t0); r != nil {
		t.Error("another kernel found the result")
	}
	deeper := want
	deeper.Depth = 128
	if r, _ := s.Lookup(key, deeper, t0); r != nil {
		t.Error("another depth found the result")
	}
	old := want
	old.MaxAge = 24 * time.Hour
	if r, _ := s.Lookup(key, old, t0.Add(25*time.Hour)); r != nil {
		t.Error("a result older than max_age was used")
	}
	if r, _ := s.Lookup(key, old, t0.Add(23*time.Hour)); r == nil {
		t.Error("a result younger than max_age was not used")
	}

	// A second result of the same key and method replaces the first.
	rec2 := rec
	rec2.At = t0.Add(time.Minute)
	rec2.Serial = "S2"
	if err := s.Remember(rec2); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil || len(recs) != 1 || recs[0].Serial != "S2" {
		t.Fatalf("records after replacing: %+v, %v", recs, err)
	}

	// Export, then seed another store from the export: found as seeded,
	// read only (the seeding store's probes.json stays absent).
	exp := filepath.Join(dir, "seeded", "fleet.json")
	if n, err := s.Export(exp); err != nil || n != 1 {
		t.Fatalf("export: %d, %v", n, err)
	}
	s2 := OpenStore(filepath.Join(dir, "state2"), []string{filepath.Join(dir, "seeded", "*.json")})
	later := t0.Add(time.Hour) // after rec2
	r, err = s2.Lookup(key, want, later)
	if err != nil || r == nil || r.Seeded != exp {
		t.Fatalf("seeded lookup: %+v, %v", r, err)
	}
	if rep := r.report(); !strings.HasPrefix(rep.From, "seeded from ") {
		t.Errorf("seeded report From = %q", rep.From)
	}
	if _, err := os.Stat(s2.Path()); !os.IsNotExist(err) {
		t.Errorf("a lookup wrote %s: %v", s2.Path(), err)
	}
	// A broken seeded file is reported, and does not hide a good one.
	if err := os.WriteFile(filepath.Join(dir, "seeded", "broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The seeds are read once per store: a new one reads the new file.
	s2 = OpenStore(filepath.Join(dir, "state2"), []string{filepath.Join(dir, "seeded", "*.json")})
	r, err = s2.Lookup(key, want, later)
	if r == nil || err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Errorf("with a broken seeded file: %+v, %v", r, err)
	}
}

// TestStoreUnreadable: an unreadable probes.json is moved aside once, with
// an error saying where; the result is stored, and later ones work.
func TestStoreUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := OpenStore(dir, nil)
	garbage := []byte("{not json\n")
	if err := os.WriteFile(s.Path(), garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	method := Method{Engine: EnginePsync, Depth: 32, BlockSize: 4096, Candidates: []string{"none", "mq-deadline"}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rec := func(dev string) Record {
		return Record{Key: Key{Class: "virtio", Model: dev}, Device: dev, At: at, Method: method,
			Figures: []Candidate{cand("mq-deadline", []float64{111e3}, []float64{50}), cand("none", []float64{143e3}, []float64{51})}}
	}
	err := s.Remember(rec("vdb"))
	if err == nil || !strings.Contains(err.Error(), "moved aside to "+s.Path()+".unreadable-") {
		t.Fatalf("Remember over an unreadable file = %v; want an error naming where it went", err)
	}
	aside, _ := filepath.Glob(s.Path() + ".unreadable-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v, want one file", aside)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || string(b) != string(garbage) {
		t.Errorf("%s holds %q, %v; want the unreadable contents", aside[0], b, err)
	}
	if err := s.Remember(rec("vdc")); err != nil {
		t.Fatalf("second Remember: %v", err)
	}
	recs, err := s.Records()
	if err != nil || len(recs) != 2 || recs[0].Device != "vdb" || recs[1].Device != "vdc" {
		t.Fatalf("Records = %+v, %v; want vdb and vdc", recs, err)
	}
}

func describe(r *Record) string {
	if r == nil {
		return "nil"
	}
	return fmt.Sprintf("%s from %q, winner %s", r.Device, r.Seeded, r.Winner)
}

// writeSeed writes recs as a seeded (exported) results file.
func writeSeed(t *testing.T, path string, recs ...Record) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeStore(path, recs); err != nil {
		t.Fatal(err)
	}
}

// Seeded and remembered results are input: a figure for a scheduler that
// is not one of the method's candidates, a date in the future, or a name
// the kernel could not have are refused, with an error naming the file and
// the entry, and the entry is not used. Before, a seed with a bfq figure
// dated 2030 was taken, and bfq applied to a disk whose rule probes only
// none and mq-deadline.
func TestStoreRefusesForgedResults(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	key := Key{Class: "virtio", Driver: "virtio_blk", HWQueues: 1, QueueDepth: 256, SizeBytes: 1 << 30, Kernel: "6.18.0"}
	method := Method{Engine: EngineIOUring, Depth: 32, BlockSize: 4096, Candidates: []string{"none", "mq-deadline"}}
	want := Want{Method: method, Choose: ChooseIOPS, Margin: 0.05, Incumbent: "mq-deadline"}
	good := []Candidate{
		cand("mq-deadline", []float64{111e3, 111e3, 111e3}, []float64{50, 50, 50}),
		cand("none", []float64{112e3, 112e3, 112e3}, []float64{50, 50, 50}), // within the margin: mq-deadline stays
	}
	bfq := append(slices.Clone(good), cand("bfq", []float64{900e3, 900e3, 900e3}, []float64{10, 10, 10}))
	escape := slices.Clone(good)
	escape[1].Scheduler = "none\x1b[2J"
	twice := append(slices.Clone(good), good[1])
	for _, c := range []struct {
		name string
		rec  Record
		why  string
	}{
		{"a figure for another scheduler", Record{Key: key, Device: "vdb", At: now.Add(-time.Hour), Method: method, Figures: bfq},
			`a figure for "bfq", which is not one of the candidates none, mq-deadline`},
		{"a date in the future", Record{Key: key, Device: "vdb", At: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Method: method, Figures: good},
			"dated 2030-01-01T00:00:00Z, in the future"},
		{"a name the kernel cannot have", Record{Key: key, Device: "vdb", At: now.Add(-time.Hour), Method: method, Figures: escape},
			`"none\x1b[2J" is not a scheduler (known: "none", "mq-deadline", "kyber", "bfq")`},
		{"a scheduler measured twice", Record{Key: key, Device: "vdb", At: now.Add(-time.Hour), Method: method, Figures: twice},
			`two figures for "none"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			seed := filepath.Join(dir, "seeded", "fleet.json")
			s := OpenStore(filepath.Join(dir, "state"), []string{filepath.Join(dir, "seeded", "*.json")})
			writeSeed(t, seed, Record{Key: key, Device: "vdz", At: now.Add(-2 * time.Hour), Method: method, Figures: good}, c.rec)
			r, err := s.Lookup(key, want, now)
			if err == nil || !strings.Contains(err.Error(), seed+": result 2 (device vdb): not used: "+c.why) {
				t.Errorf("Lookup error = %v, want one naming %s, result 2 and %s", err, seed, c.why)
			}
			// The valid entry is used, the forged one is not.
			if r == nil || r.Device != "vdz" || r.Winner != "mq-deadline" {
				t.Errorf("Lookup = %s, want the valid result (vdz, mq-deadline stays)", describe(r))
			}

			// The same entry in the disk's own probes.json is refused
			// alike.
			if err := writeStore(s.Path(), []Record{c.rec}); err != nil {
				t.Fatal(err)
			}
			r, err = s.Lookup(key, want, now)
			if err == nil || !strings.Contains(err.Error(), s.Path()+": result 1 (device vdb): "+c.why) {
				t.Errorf("Lookup error = %v, want one naming %s, result 1", err, s.Path())
			}
			if r == nil || r.Device != "vdz" {
				t.Errorf("Lookup = %s, want the seeded valid result", describe(r))
			}
		})
	}
}

// probes.json and seeded files are read the safe way: a FIFO or a link to
// /dev/zero is an error naming it, at once. Before, a FIFO probes.json
// hung `iosched probe`, list and plan, and a seed linked to /dev/zero ran
// the daemon out of memory.
func TestStoreRefusesWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	key := Key{Class: "virtio"}
	want := Want{Method: Method{Engine: EnginePsync, Depth: 32, BlockSize: 4096, Candidates: []string{"none", "mq-deadline"}}}
	for name, create := range map[string]func(string) error{
		"fifo": func(p string) error { return unix.Mkfifo(p, 0o644) },
		"zero": func(p string) error { return os.Symlink("/dev/zero", p) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			seed := filepath.Join(dir, "seed.json")
			s := OpenStore(dir, []string{seed})
			for _, p := range []string{s.Path(), seed} {
				if err := create(p); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := s.Lookup(key, want, time.Now())
				done <- err
			}()
			select {
			case err := <-done:
				for _, p := range []string{s.Path(), seed} {
					if err == nil || !strings.Contains(err.Error(), p) {
						t.Errorf("Lookup = %v, want an error naming %s", err, p)
					}
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Lookup blocked reading the store")
			}
		})
	}
}

// Seeded reads the seeded files in glob and name order, as Lookup does;
// one of another version, or not JSON, is an error naming it, after the
// files that could be read.
func TestSeeded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rec := func(dev string) string {
		return `{"device": "` + dev + `", "engine": "psync", "depth": 32, "block_size": 4096, "candidates": ["none", "mq-deadline"]}`
	}
	b := write("b.json", `{"version": 1, "results": [`+rec("vdb")+`]}`)
	a := write("a.json", `{"version": 1, "results": [`+rec("vda")+`, `+rec("vdc")+`]}`)
	v2 := write("c.json", `{"version": 2, "results": []}`)
	bad := write("d.json", `{"version": 1,`)
	write("e.txt", `not a seed`)
	s := OpenStore(filepath.Join(dir, "state"), []string{filepath.Join(dir, "*.json"), filepath.Join(dir, "none-*.json")})
	files, err := s.Seeded()
	var got []string
	for _, f := range files {
		for _, r := range f.Results {
			got = append(got, filepath.Base(f.Path)+":"+r.Device)
		}
	}
	if want := []string{"a.json:vda", "a.json:vdc", "b.json:vdb"}; !slices.Equal(got, want) || files[0].Path != a || files[1].Path != b {
		t.Errorf("seeded: %v, want %v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), v2+": version 2, want 1") || !strings.Contains(err.Error(), bad+": unexpected EOF") {
		t.Errorf("err = %v; want c.json's version and d.json's JSON named", err)
	}
	if _, err := OpenStore(dir, []string{"["}).Seeded(); err == nil || !strings.Contains(err.Error(), `probe_results "["`) {
		t.Errorf("a bad glob: %v", err)
	}
}

// A key read back from its String (a metrics label) is the key, a model
// with slashes, no model and no driver included; a string of another
// shape is refused.
func TestParseKeyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, k := range []Key{
		{Class: "virtio", Driver: "virtio_blk", Model: "", HWQueues: 4, QueueDepth: 256, SizeBytes: 10 << 30, Kernel: "6.18.0-1-amd64"},
		{Class: "scsi", Driver: "", Model: "QEMU HARDDISK/2.5+", HWQueues: -1, QueueDepth: 0, SizeBytes: 0, Kernel: "6.1.0"},
	} {
		got, err := ParseKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", k.String(), got, err, k)
		}
	}
	for _, s := range []string{"", "virtio/virtio_blk/-/hwq4/qd256/10B", "virtio/virtio_blk/-/4/qd256/10B/6.18", "virtio/virtio_blk/-/hwq4/qd256/tenB/6.18"} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q): no error", s)
		}
	}
}

// A result measured with nr_requests candidates holds one figure per
// (scheduler, nr_requests) pair, serves only a lookup of the same
// nr_requests, and its decision, made again, carries the winner's
// nr_requests; a figure whose nr_requests is not among the method's is
// refused.
func TestStoreNrRequests(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	key := Key{Class: "virtio", Driver: "virtio_blk", HWQueues: 1, QueueDepth: 128, SizeBytes: 1 << 30, Kernel: "6.18.0"}
	method := Method{Engine: EngineIOUring, Depth: 32, BlockSize: 4096, Candidates: []string{"mq-deadline"}, NrRequests: []int{4, probeopt.NrRequestsDefault}}
	pair := func(nr, set int, iops float64) Candidate {
		c := cand("mq-deadline", []float64{iops, iops, iops}, []float64{50, 50, 50})
		c.NrRequests, c.NrRequestsSet = nr, set
		return c
	}
	figs := []Candidate{pair(4, 4, 1000), pair(probeopt.NrRequestsDefault, 256, 4000)}
	s := OpenStore(t.TempDir(), nil)
	if err := s.Remember(Record{Key: key, Device: "vdb", At: now.Add(-time.Hour), Method: method, Figures: figs}); err != nil {
		t.Fatal(err)
	}
	want := Want{Method: method, Choose: ChooseIOPS, Margin: 0.05, Incumbent: "mq-deadline nr_requests 4"}
	r, err := s.Lookup(key, want, now)
	if err != nil || r == nil || r.Winner != "mq-deadline" || r.WinnerNr != 256 {
		t.Fatalf("Lookup = %s, %v; want mq-deadline with nr_requests 256", describe(r), err)
	}
	other := want
	other.NrRequests = []int{4, 64}
	if r, err := s.Lookup(key, other, now); r != nil || err != nil {
		t.Errorf("Lookup of other nr_requests = %s, %v; want none", describe(r), err)
	}
	none := want
	none.NrRequests, none.Incumbent = nil, "mq-deadline"
	if r, err := s.Lookup(key, none, now); r != nil || err != nil {
		t.Errorf("Lookup without nr_requests = %s, %v; want none", describe(r), err)
	}
	bad := Record{Key: key, Device: "vdb", At: now, Method: method, Figures: []Candidate{pair(4, 4, 1000), pair(64, 64, 4000)}}
	if err := bad.Check(now); err == nil || !strings.Contains(err.Error(), `a figure for "mq-deadline nr_requests 64", whose nr_requests 64 (set 64) is not one of [4, 0]`) {
		t.Errorf("Check = %v", err)
	}
	bad.Figures = []Candidate{pair(4, 4, 1000), pair(4, 4, 1000)}
	if err := bad.Check(now); err == nil || !strings.Contains(err.Error(), `two figures for "mq-deadline nr_requests 4"`) {
		t.Errorf("Check = %v", err)
	}
}
