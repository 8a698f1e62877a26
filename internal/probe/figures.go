package probe

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
)

// Figures are one candidate's results: of one round, or the medians over
// rounds. The deep-queue measurement (Options.Depth reads in flight) gives
// IOPS, MiBs and the percentiles; the depth-1 one the QD1 fields.
type Figures struct {
	IOPS    float64 `json:"iops"`
	MiBs    float64 `json:"mib_s"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	P999us  float64 `json:"p999_us"`
	QD1IOPS float64 `json:"qd1_iops"`
	QD1P50  float64 `json:"qd1_p50_us"`
	QD1P99  float64 `json:"qd1_p99_us"`
	QD1P999 float64 `json:"qd1_p999_us"`
	// CPUPerIOus is the probe's own CPU time (user+system) per read in
	// the deep-queue measurement, in microseconds.
	CPUPerIOus float64 `json:"cpu_us_per_io"`
}

// RoundFigures are one round's figures of one candidate.
type RoundFigures struct {
	Round int `json:"round"`
	// Position is the candidate's place in the round's order (1 = first).
	Position int `json:"position"`
	Figures
	// Curve is the round's figures at each of the probe's depths.
	Curve []CurvePoint `json:"curve,omitempty"`
}

// Candidate is one scheduler's results: medians over rounds, and each
// round.
type Candidate struct {
	Scheduler string `json:"scheduler"`
	// NrRequests is the nr_requests asked for with the scheduler when the
	// probe measured that dimension (probeopt.NrRequestsDefault: the
	// kernel's value for the scheduler), and NrRequestsSet the value the
	// disk took, read back after the write (with none, the kernel holds
	// it to the hardware's tags); 0 without the dimension.
	NrRequests    int `json:"nr_requests,omitempty"`
	NrRequestsSet int `json:"nr_requests_set,omitempty"`
	Figures
	Rounds []RoundFigures `json:"rounds"`
	// Spread is how far the rounds disagree on the figure the probe
	// compares: (max - min) / median over the rounds.
	Spread float64 `json:"spread"`
	// Curve is the figures at each of the probe's depths, in increasing
	// depth; empty for a result measured before curves existed (Points
	// fills in).
	Curve []CurvePoint `json:"curve,omitempty"`
}

// Name is the candidate as reports and decisions name it: the scheduler,
// followed by its nr_requests when the probe measured that dimension
// ("mq-deadline nr_requests 4", "none nr_requests default").
func (c *Candidate) Name() string {
	if c.NrRequestsSet == 0 {
		return c.Scheduler
	}
	return pairName(c.Scheduler, c.NrRequests, true)
}

// Won reports whether c is the candidate d chose.
func (c *Candidate) Won(d Decision) bool {
	return c.Scheduler == d.Winner && c.NrRequestsSet == d.WinnerNr
}

// Label is Name, with the value the disk took when it is not the one
// named ("none nr_requests 256 (128)": with none the kernel holds
// nr_requests to the hardware's tags; "default (256)": the kernel's).
func (c *Candidate) Label() string {
	if c.NrRequestsSet == 0 || c.NrRequestsSet == c.NrRequests {
		return c.Name()
	}
	return fmt.Sprintf("%s (%d)", c.Name(), c.NrRequestsSet)
}

// pairName names a (scheduler, nr_requests) candidate; withNr false
// names the scheduler alone (no nr_requests dimension).
func pairName(sched string, nr int, withNr bool) string {
	if !withNr {
		return sched
	}
	return sched + " nr_requests " + probeopt.NrRequestsText(nr)
}

// measured is what one measurement gives.
type measured struct {
	iops, mibs, p50, p99, p999, cpuPerIO float64
}

func summarize(s *Sample, blockSize int) measured {
	var m measured
	if s.Elapsed <= 0 || s.Reads == 0 {
		return m
	}
	secs := s.Elapsed.Seconds()
	m.iops = float64(s.Reads) / secs
	m.mibs = m.iops * float64(blockSize) / (1 << 20)
	slices.Sort(s.Latencies)
	m.p50 = percentileUs(s.Latencies, 0.50)
	m.p99 = percentileUs(s.Latencies, 0.99)
	m.p999 = percentileUs(s.Latencies, 0.999)
	m.cpuPerIO = float64(s.CPU) / float64(time.Microsecond) / float64(s.Reads)
	return m
}

// percentileUs is the q-th quantile of sorted nanoseconds, in microseconds
// (nearest rank).
func percentileUs(sorted []uint32, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / 1000
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medians sets c.Figures to the medians of its rounds.
func (c *Candidate) medians() {
	pick := func(f func(*Figures) float64) float64 {
		xs := make([]float64, len(c.Rounds))
		for i := range c.Rounds {
			xs[i] = f(&c.Rounds[i].Figures)
		}
		return median(xs)
	}
	c.Figures = Figures{
		IOPS:       pick(func(f *Figures) float64 { return f.IOPS }),
		MiBs:       pick(func(f *Figures) float64 { return f.MiBs }),
		P50us:      pick(func(f *Figures) float64 { return f.P50us }),
		P99us:      pick(func(f *Figures) float64 { return f.P99us }),
		P999us:     pick(func(f *Figures) float64 { return f.P999us }),
		QD1IOPS:    pick(func(f *Figures) float64 { return f.QD1IOPS }),
		QD1P50:     pick(func(f *Figures) float64 { return f.QD1P50 }),
		QD1P99:     pick(func(f *Figures) float64 { return f.QD1P99 }),
		QD1P999:    pick(func(f *Figures) float64 { return f.QD1P999 }),
		CPUPerIOus: pick(func(f *Figures) float64 { return f.CPUPerIOus }),
	}
	c.Curve = medianCurve(c.Rounds)
}

// medianCurve is each depth's medians over the rounds' curves, in the
// first round's order of depths; nil when the rounds have none.
func medianCurve(rounds []RoundFigures) []CurvePoint {
	if len(rounds) == 0 || len(rounds[0].Curve) == 0 {
		return nil
	}
	out := make([]CurvePoint, 0, len(rounds[0].Curve))
	for _, p := range rounds[0].Curve {
		var observed, iops, p50, p99, runs []float64
		seen := true
		for _, r := range rounds {
			for _, q := range r.Curve {
				if q.Depth == p.Depth {
					observed = append(observed, q.ObservedDepth)
					iops = append(iops, q.IOPS)
					p50 = append(p50, q.P50us)
					p99 = append(p99, q.P99us)
					if q.IOWorkerRuns.Known {
						runs = append(runs, float64(q.IOWorkerRuns.N))
					} else {
						seen = false
					}
				}
			}
		}
		pt := CurvePoint{Depth: p.Depth, ObservedDepth: median(observed), IOPS: median(iops), P50us: median(p50), P99us: median(p99)}
		if seen && len(runs) > 0 {
			pt.IOWorkerRuns = HandoffsOf(int64(median(runs)))
		}
		out = append(out, pt)
	}
	return out
}

// CurvePoint is one candidate's random-read figures at one depth: the
// medians over rounds. Depth is the reads the probe kept in flight;
// ObservedDepth is the mean requests in flight the disk itself counted
// over the measurement (its stat file's time_in_queue over elapsed time).
// The two differ when the reader, not the disk, is the bottleneck; live
// observation sees only the disk's count, so a curve is read by
// ObservedDepth.
type CurvePoint struct {
	Depth         int     `json:"depth"`
	ObservedDepth float64 `json:"observed_depth"`
	IOPS          float64 `json:"iops"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	// IOWorkerRuns counts io_uring's hand-offs to io-wq workers over
	// the point (see workerRuns): reads the block layer could not take
	// without blocking. Unknown (and left out of the JSON) where the
	// engine cannot see them.
	IOWorkerRuns Handoffs `json:"io_worker_runs,omitzero"`
}

// Handoffs is a count of io_uring's hand-offs to io-wq, or unknown (the
// zero value). A value, not a pointer, so that points compare with ==.
type Handoffs struct {
	N     int64
	Known bool
}

// HandoffsOf is n hand-offs, or unknown when n < 0 (Sample.WorkerRuns).
func HandoffsOf(n int64) Handoffs {
	if n < 0 {
		return Handoffs{}
	}
	return Handoffs{N: n, Known: true}
}

// IsZero reports an unknown count, which JSON leaves out.
func (h Handoffs) IsZero() bool { return !h.Known }

// MarshalJSON writes the count, or null when unknown.
func (h Handoffs) MarshalJSON() ([]byte, error) {
	if !h.Known {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, h.N, 10), nil
}

// UnmarshalJSON reads a count, or null (or nothing) as unknown.
func (h *Handoffs) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*h = Handoffs{}
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("io_worker_runs %s: want a count, 0 or more", b)
	}
	*h = Handoffs{N: n, Known: true}
	return nil
}

// Points is c's curve; a result measured before curves existed has none
// and counts as two points, depth 1 (the QD1 figures) and deep (the
// deep-queue figures at deep reads in flight), with the disk's depth taken
// to be the probe's.
func (c Candidate) Points(deep int) []CurvePoint {
	if len(c.Curve) > 0 {
		return c.Curve
	}
	var pts []CurvePoint
	if c.QD1IOPS > 0 {
		pts = append(pts, CurvePoint{Depth: 1, ObservedDepth: 1, IOPS: c.QD1IOPS, P50us: c.QD1P50, P99us: c.QD1P99})
	}
	if c.IOPS > 0 && deep > 1 {
		pts = append(pts, CurvePoint{Depth: deep, ObservedDepth: float64(deep), IOPS: c.IOPS, P50us: c.P50us, P99us: c.P99us})
	}
	return pts
}
