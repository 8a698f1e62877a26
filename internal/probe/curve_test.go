package probe

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// curveCand is a candidate whose rounds each measured a curve: the
// deep-queue and depth-1 figures as cand's, and at each depth the IOPS of
// iopsAt(depth, round) with an observed depth of half the depth.
func curveCand(name string, depths []int, iops, p99 []float64, iopsAt func(depth, round int) float64) Candidate {
	c := Candidate{Scheduler: name}
	for i := range iops {
		rf := RoundFigures{Round: i + 1, Figures: Figures{IOPS: iops[i], QD1IOPS: iops[i] / 4, QD1P99: p99[i]}}
		for _, d := range depths {
			rf.Curve = append(rf.Curve, CurvePoint{Depth: d, ObservedDepth: float64(d) / 2, IOPS: iopsAt(d, i+1), P50us: float64(d), P99us: 2 * float64(d)})
		}
		c.Rounds = append(c.Rounds, rf)
	}
	c.medians()
	return c
}

// A candidate's curve is each depth's medians over its rounds.
func TestMedianCurve(t *testing.T) {
	t.Parallel()
	c := curveCand("none", []int{1, 4, 16}, []float64{9, 9, 9}, []float64{5, 5, 5}, func(d, round int) float64 {
		return float64(d*1000 + []int{0, 30, 10, 20}[round]) // medians: d*1000 + 20
	})
	want := []CurvePoint{
		{Depth: 1, ObservedDepth: 0.5, IOPS: 1020, P50us: 1, P99us: 2},
		{Depth: 4, ObservedDepth: 2, IOPS: 4020, P50us: 4, P99us: 8},
		{Depth: 16, ObservedDepth: 8, IOPS: 16020, P50us: 16, P99us: 32},
	}
	if !slices.Equal(c.Curve, want) {
		t.Errorf("curve %+v, want %+v", c.Curve, want)
	}
	if !slices.Equal(c.Points(32), want) {
		t.Errorf("Points = %+v, want the curve", c.Points(32))
	}
	if got := medianCurve(nil); got != nil {
		t.Errorf("no rounds: %+v", got)
	}
}

// The JSON a reader of --json, probes.json, --export and seed files sees:
// per candidate a "curve" of points with exactly the five documented
// fields, beside the deep-queue and depth-1 fields of before; the
// depths at the top.
func TestCurveJSONShape(t *testing.T) {
	t.Parallel()
	depths := []int{1, 4, 16, 64}
	rep := &Report{Device: "loop7", Engine: EngineIOUring, Depth: 32, Depths: depths, BlockSize: 4096,
		Candidates: []Candidate{
			curveCand("none", depths, []float64{143e3}, []float64{50}, func(d, _ int) float64 { return float64(d) * 1e4 }),
			curveCand("mq-deadline", depths, []float64{111e3}, []float64{50}, func(d, _ int) float64 { return float64(d) * 9e3 }),
		}}
	checkCands := func(t *testing.T, where string, cands any) {
		t.Helper()
		list, ok := cands.([]any)
		if !ok || len(list) != 2 {
			t.Fatalf("%s: candidates %v", where, cands)
		}
		for _, c := range list {
			m := c.(map[string]any)
			for _, k := range []string{"scheduler", "iops", "mib_s", "p50_us", "p99_us", "qd1_iops", "qd1_p99_us", "rounds", "curve"} {
				if _, ok := m[k]; !ok {
					t.Errorf("%s: candidate lacks %q: %v", where, k, m)
				}
			}
			curve, _ := m["curve"].([]any)
			if len(curve) != len(depths) {
				t.Fatalf("%s: curve %v, want %d points", where, m["curve"], len(depths))
			}
			for i, p := range curve {
				pt := p.(map[string]any)
				var keys []string
				for k := range pt {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				if !slices.Equal(keys, []string{"depth", "iops", "observed_depth", "p50_us", "p99_us"}) {
					t.Errorf("%s: point keys %v", where, keys)
				}
				if pt["depth"] != float64(depths[i]) || pt["observed_depth"] != float64(depths[i])/2 {
					t.Errorf("%s: point %d = %v", where, i, pt)
				}
			}
			// Each round carries its own curve too.
			for _, r := range m["rounds"].([]any) {
				if rc, _ := r.(map[string]any)["curve"].([]any); len(rc) != len(depths) {
					t.Errorf("%s: round %v lacks its curve", where, r)
				}
			}
		}
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(toInts(got["depths"]), depths) || got["depth"] != 32.0 {
		t.Errorf("report depths %v, depth %v", got["depths"], got["depth"])
	}
	checkCands(t, "--json", got["candidates"])

	// probes.json and an export: the record's depths and figures.
	dir := t.TempDir()
	s := OpenStore(dir, nil)
	rep.Key = Key{Class: "loop", QueueDepth: 128}
	if err := s.Remember(RecordOf(rep, time.Now())); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(dir, "fleet.json")
	if _, err := s.Export(exp); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{s.Path(), exp} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Results []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(b, &f); err != nil || len(f.Results) != 1 {
			t.Fatalf("%s: %v, %s", path, err, b)
		}
		if !slices.Equal(toInts(f.Results[0]["depths"]), depths) || f.Results[0]["depth"] != 32.0 {
			t.Errorf("%s: depths %v, depth %v", path, f.Results[0]["depths"], f.Results[0]["depth"])
		}
		checkCands(t, path, f.Results[0]["figures"])
	}
}

func toInts(v any) []int {
	list, _ := v.([]any)
	var out []int
	for _, x := range list {
		f, _ := x.(float64)
		out = append(out, int(f))
	}
	return out
}

// oldProbesJSON is a probes.json as iosched wrote it before probes
// measured curves: no depths, no curve.
const oldProbesJSON = `{
  "version": 1,
  "results": [
    {
      "key": {"class": "virtio", "driver": "virtio_blk", "model": "", "hw_queues": 1, "queue_depth": 256, "size_bytes": 1073741824, "kernel": "6.18.0"},
      "device": "vdb",
      "at": "2026-11-30T12:00:00Z",
      "engine": "io_uring",
      "depth": 32,
      "block_size": 4096,
      "candidates": ["none", "mq-deadline"],
      "duration_s": 1,
      "rounds": 1,
      "incumbent": "mq-deadline",
      "figures": [
        {"scheduler": "mq-deadline", "iops": 111000, "mib_s": 433.6, "p50_us": 250, "p99_us": 700, "p999_us": 900,
         "qd1_iops": 20000, "qd1_p50_us": 45, "qd1_p99_us": 50, "qd1_p999_us": 80, "cpu_us_per_io": 1.5,
         "rounds": [{"round": 1, "position": 1, "iops": 111000, "qd1_iops": 20000, "qd1_p99_us": 50}]},
        {"scheduler": "none", "iops": 143000, "mib_s": 558.6, "p50_us": 200, "p99_us": 600, "p999_us": 800,
         "qd1_iops": 21000, "qd1_p50_us": 44, "qd1_p99_us": 51, "qd1_p999_us": 79, "cpu_us_per_io": 1.4,
         "rounds": [{"round": 1, "position": 2, "iops": 143000, "qd1_iops": 21000, "qd1_p99_us": 51}]}
      ],
      "winner": "none",
      "reason": "none wins",
      "provenance": "probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%",
      "choose": "balanced",
      "margin": 0.05
    }
  ]
}
`

// A result remembered before curves still loads, is found by a lookup
// that asks for the default curve (its figures at depth 1 and the deep
// depth are what the decision reads), decides, and counts as two points.
// A result with the curve asked is taken before it, in probes.json or
// seeded; one of another curve is not; and remembering a result with a
// curve replaces it.
func TestStoreBeforeCurves(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedGlob := filepath.Join(dir, "seeded", "*.json")
	s := OpenStore(filepath.Join(dir, "state"), []string{seedGlob})
	if err := os.MkdirAll(filepath.Dir(s.Path()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), []byte(oldProbesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil || len(recs) != 1 || len(recs[0].Depths) != 0 || len(recs[0].Figures[0].Curve) != 0 {
		t.Fatalf("old probes.json: %+v, %v", recs, err)
	}
	key := recs[0].Key
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	want := Want{Method: Method{Engine: EngineIOUring, Depth: 32, BlockSize: 4096, Depths: []int{1, 4, 16, 64}, Candidates: []string{"none", "mq-deadline"}},
		Choose: ChooseIOPS, Margin: 0.05, Incumbent: "mq-deadline"}
	r, err := s.Lookup(key, want, now)
	if err != nil || r == nil || r.Device != "vdb" || r.Winner != "none" || !strings.Contains(r.Provenance, "+29%") {
		t.Fatalf("lookup of an old result: %s, %v", describe(r), err)
	}
	// Decided again by the choice asked: balanced keeps mq-deadline only
	// past the margin on depth-1 p99 (51 vs 50 is within it).
	latency := want
	latency.Choose = ChooseLatency
	if r, _ := s.Lookup(key, latency, now); r == nil || r.Winner != "mq-deadline" {
		t.Errorf("latency lookup of an old result: %s", describe(r))
	}
	pts := r.Figures[1].Points(r.Depth)
	if len(pts) != 2 || pts[0] != (CurvePoint{Depth: 1, ObservedDepth: 1, IOPS: 21000, P50us: 44, P99us: 51}) || pts[1].Depth != 32 || pts[1].IOPS != 143000 {
		t.Errorf("an old result's points: %+v", pts)
	}
	// Another deep depth is another method, old or new.
	deeper := want
	deeper.Depth = 64
	if r, _ := s.Lookup(key, deeper, now); r != nil {
		t.Errorf("depth 64 found the depth-32 result: %s", describe(r))
	}

	// A seeded result with the curve asked is taken before the old one.
	curved := func(device string, depths []int, at time.Time) Record {
		m := want.Method
		m.Depths = depths
		return Record{Key: key, Device: device, At: at, Method: m, Incumbent: "mq-deadline", Figures: []Candidate{
			curveCand("mq-deadline", depths, []float64{111e3}, []float64{50}, func(d, _ int) float64 { return float64(d) * 9e3 }),
			curveCand("none", depths, []float64{100e3}, []float64{50}, func(d, _ int) float64 { return float64(d) * 8e3 }),
		}}
	}
	writeSeed(t, filepath.Join(dir, "seeded", "fleet.json"), curved("vdz", []int{1, 4, 16, 64}, now.Add(-48*time.Hour)))
	s = OpenStore(filepath.Join(dir, "state"), []string{seedGlob}) // seeds are read once per store
	if r, err := s.Lookup(key, want, now); err != nil || r == nil || r.Device != "vdz" || r.Winner != "mq-deadline" || len(r.Figures[0].Curve) != 4 {
		t.Errorf("with a seeded curve: %s, %v; want the seeded result with its curve", describe(r), err)
	}
	// Another curve is not the one asked: the old result serves.
	other := want
	other.Depths = []int{1, 8}
	if r, _ := s.Lookup(key, other, now); r == nil || r.Device != "vdb" {
		t.Errorf("depths 1, 8: %s; want the old result", describe(r))
	}

	// Remembering a result with a curve replaces the old one; one of
	// another curve stays beside it.
	if err := s.Remember(curved("vdc", []int{1, 4, 16, 64}, now)); err != nil {
		t.Fatal(err)
	}
	if err := s.Remember(curved("vdd", []int{1, 8}, now)); err != nil {
		t.Fatal(err)
	}
	recs, err = s.Records()
	if err != nil || len(recs) != 2 || recs[0].Device != "vdc" || recs[1].Device != "vdd" {
		t.Fatalf("records after remembering curves: %+v, %v", recs, err)
	}
	if r, _ := s.Lookup(key, other, now); r == nil || r.Device != "vdd" {
		t.Errorf("depths 1, 8 after remembering: %s", describe(r))
	}

	// A curve that is not at the record's depths is refused, saying so.
	bad := curved("vdx", []int{1, 4, 16, 64}, now)
	bad.Depths = []int{1, 4, 16, 32}
	if err := bad.Check(now); err == nil || !strings.Contains(err.Error(), "mq-deadline's curve: points at depths [1, 4, 16, 64], where the record's depths are [1, 4, 16, 32]") {
		t.Errorf("Check of a curve at other depths = %v", err)
	}
}
