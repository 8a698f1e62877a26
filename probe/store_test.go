package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStore(t *testing.T) {
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
	r, err = s2.Lookup(key, want, t0)
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
	r, err = s2.Lookup(key, want, t0)
	if r == nil || err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Errorf("with a broken seeded file: %+v, %v", r, err)
	}
}

// TestStoreUnreadable: an unreadable probes.json is moved aside once, with
// an error saying where; the result is stored, and later ones work.
func TestStoreUnreadable(t *testing.T) {
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
