package fleet

import (
	"fmt"
	"slices"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// SeedOptions are the method the exported results say they were
// measured by. The metrics carry each candidate's curve but not the
// probe's engine, deep-queue depth or block size, and a disk's probe
// takes a seeded result only when its rule asks for the same method
// (probe.Method): these must be what the fleet's rules ask for.
type SeedOptions struct {
	// Engine is a probe engine's name; "" for the first of
	// probeopt.EngineNames (io_uring).
	Engine string
	// Depth and BlockSize are the deep-queue depth and read size; 0 for
	// probeopt.Default's (32, 4096).
	Depth, BlockSize int
	// MinMachines is the fewest machines a key needs to be exported.
	MinMachines int
	// At is when the results are dated: the end of the query's window.
	At time.Time
}

// Seeds are the fleet's median curves as probe results, one per key with
// curves of at least two candidates from at least o.MinMachines machines,
// each read at the depths every candidate has; Record.Check holds for
// each. A key iosched did not write (ParseKey refuses it) is left out.
func Seeds(rep *Report, o SeedOptions) []probe.Record {
	def := probeopt.Default()
	if o.Engine == "" {
		o.Engine = probeopt.EngineNames()[0]
	}
	if o.Depth == 0 {
		o.Depth = def.Depth
	}
	if o.BlockSize == 0 {
		o.BlockSize = def.BlockSize
	}
	var out []probe.Record
	for _, k := range rep.Keys {
		key, err := probe.ParseKey(k.Key)
		if err != nil || len(k.Curves) < 2 || len(k.Curves) > probeopt.MaxCandidates || k.Machines < o.MinMachines {
			continue
		}
		depths := commonDepths(k.Curves)
		if len(depths) == 0 || len(depths) > probeopt.MaxDepths {
			continue
		}
		rec := probe.Record{
			Key: key, Device: "fleet", At: o.At.UTC(),
			Method: probe.Method{Engine: o.Engine, Depth: o.Depth, BlockSize: o.BlockSize, Depths: depths},
		}
		for _, c := range k.Curves {
			var pts []probe.CurvePoint
			for _, p := range c.Points {
				if slices.Contains(depths, p.Depth) {
					pts = append(pts, probe.CurvePoint{Depth: p.Depth, ObservedDepth: float64(p.Depth), IOPS: p.Median})
				}
			}
			deep, _ := adapt.IOPSAt(pts, float64(o.Depth))
			qd1, _ := adapt.IOPSAt(pts, 1)
			rec.Candidates = append(rec.Candidates, c.Scheduler)
			rec.Figures = append(rec.Figures, probe.Candidate{Scheduler: c.Scheduler,
				Figures: probe.Figures{IOPS: deep, QD1IOPS: qd1}, Curve: pts})
		}
		if rec.Check(o.At) != nil {
			continue // a curve a probe could not have measured
		}
		out = append(out, rec)
	}
	return out
}

// ExportSeeds writes Seeds to path as a seeded file ([daemon]
// probe_results), through the probe store's own encoder, and returns
// how many results it holds.
func ExportSeeds(path string, rep *Report, o SeedOptions) (int, error) {
	recs := Seeds(rep, o)
	if err := probe.WriteResults(path, recs); err != nil {
		return 0, fmt.Errorf("export seeds: %w", err)
	}
	return len(recs), nil
}

// commonDepths are the depths at which every curve has a point, in
// increasing order.
func commonDepths(curves []Curve) []int {
	var out []int
	for _, p := range curves[0].Points {
		in := true
		for _, c := range curves[1:] {
			if !slices.ContainsFunc(c.Points, func(q CurvePoint) bool { return q.Depth == p.Depth }) {
				in = false
				break
			}
		}
		if in {
			out = append(out, p.Depth)
		}
	}
	return out
}
