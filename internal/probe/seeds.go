package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// Seeds are the seeded results a policy names ([daemon] probe_results),
// read, decoded and checked once, on first use, and then shared, read
// only, by every lookup made under that policy: the lookups of a thousand
// disks cost one decoding of the files, not one each. A policy load makes
// a new Seeds (NewSeeds), so an edited file is read again on a reload.
//
// Memory: a file is decoded as it is read, one result at a time, never
// held whole, and only the results that pass Record.Check are kept, with
// an index by Key. What a Seeds holds is bounded by the files' size (at
// most maxSeedFile each) times the decoded form's ratio to JSON, whatever
// the number of disks looking it up (BenchmarkSeedsLookup measures it).
type Seeds struct {
	globs []string
	now   func() time.Time

	once  sync.Once
	files []SeededFile
	// index holds, for each file, its results' positions by key.
	index []map[Key][]int
	err   error

	// own is the state directory's probes.json, for the stores that
	// share these seeds (Store.lookupRecords).
	own ownCache
}

// NewSeeds returns the seeds of globs, read on first use.
func NewSeeds(globs []string) *Seeds {
	return &Seeds{globs: slices.Clone(globs), now: time.Now}
}

// Globs are the globs the seeds were read from.
func (s *Seeds) Globs() []string { return slices.Clone(s.globs) }

// Files are the seeded files read, in glob and name order, each with the
// results that passed Record.Check; the error names each glob or file that
// could not be read and each result refused (file, its place in it,
// device, why). Both are shared: the caller must not modify them.
func (s *Seeds) Files() ([]SeededFile, error) {
	s.load()
	return s.files, s.err
}

// Err is Files' error: what a policy check and the daemon's status report.
func (s *Seeds) Err() error {
	s.load()
	return s.err
}

func (s *Seeds) load() {
	s.once.Do(func() {
		var errs []error
		now := s.now()
		for _, g := range s.globs {
			names, err := filepath.Glob(g)
			if err != nil {
				errs = append(errs, fmt.Errorf("probe_results %q: %w", g, err))
				continue
			}
			slices.Sort(names)
			for _, f := range names {
				recs, err := readSeedFile(f, now)
				if err != nil {
					errs = append(errs, err)
				}
				if recs == nil {
					continue
				}
				idx := map[Key][]int{}
				for i := range recs {
					idx[recs[i].Key] = append(idx[recs[i].Key], i)
				}
				s.files = append(s.files, SeededFile{Path: f, Results: recs})
				s.index = append(s.index, idx)
			}
		}
		s.err = errors.Join(errs...)
	})
}

// readSeedFile decodes a seeded file result by result: the results that
// pass Record.Check (each with its Entry), and an error for each refused
// and for a file that does not decode, naming the file and the result. A
// file that is not one (a FIFO), too large or of another version gives no
// results; one that breaks off (truncated) keeps those before.
func readSeedFile(path string, now time.Time) ([]Record, error) {
	r, err := fileio.Open(path, maxSeedFile)
	if err != nil {
		return nil, fmt.Errorf("seeded probe results: %w", err)
	}
	defer r.Close()
	var recs []Record
	var errs []error
	n := 0 // results decoded so far
	err = decodeStoreStream(r, func(rec *Record) {
		n++
		if err := rec.Check(now); err != nil {
			errs = append(errs, fmt.Errorf("seeded probe results: %s: result %d (device %s): not used: %w", path, n, rec.Device, err))
			return
		}
		rec.Entry = n
		recs = append(recs, *rec)
	})
	if err != nil {
		var ve *versionError
		if errors.As(err, &ve) {
			recs, errs = nil, nil // results of another format: none is judged
		}
		errs = append(errs, fmt.Errorf("seeded probe results: %s: %w", path, err))
	}
	if recs == nil {
		recs = []Record{}
	}
	return slices.Clip(recs), errors.Join(errs...)
}

// versionError: the file is of another format version (0: none given).
type versionError struct{ version int }

func (e *versionError) Error() string {
	return fmt.Sprintf("version %d, want %d", e.version, storeVersion)
}

// decodeStoreStream decodes a store file ({"version": 1, "results":
// [...]}) from r, calling each with every result in turn. The version may
// come after the results (a map's keys are written in order): a
// *versionError then says every result given is of no use.
func decodeStoreStream(r io.Reader, each func(*Record)) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	version := 0
	for dec.More() {
		t, err := dec.Token()
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		switch t {
		case "version":
			if err := dec.Decode(&version); err != nil {
				return fmt.Errorf("version: %w", err)
			}
			if version != storeVersion {
				return &versionError{version}
			}
		case "results":
			if err := expectDelim(dec, '['); err != nil {
				return fmt.Errorf("results: %w", err)
			}
			n := 0
			for dec.More() {
				n++
				var rec Record
				if err := dec.Decode(&rec); err != nil {
					return fmt.Errorf("result %d (at byte %d): %w", n, dec.InputOffset(), err)
				}
				each(&rec)
			}
			if err := expectDelim(dec, ']'); err != nil {
				return fmt.Errorf("after result %d (at byte %d): %w", n, dec.InputOffset(), err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if version != storeVersion {
		return &versionError{version}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more after the end of the results' object")
	}
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("%v where %q was expected", t, want)
	}
	return nil
}

// Limits of a result's figures: a result beyond them is not one a probe
// measured (an edited or forged file), and would win or lose every
// decision it took part in.
const (
	// MaxResultIOPS bounds IOPS figures: a hundred times the fastest
	// single devices' few million.
	MaxResultIOPS = 1e8
	// MaxResultMiBs bounds MiB/s: 1 TiB/s.
	MaxResultMiBs = 1 << 20
	// MaxResultLatencyUs bounds a latency: an hour.
	MaxResultLatencyUs = 3600e6
	// MaxResultCPUPerIOus bounds the CPU time per read: a second.
	MaxResultCPUPerIOus = 1e6
	// MaxResultObservedDepth bounds the requests a disk counted in
	// flight: blk-mq's largest tag set (BLK_MQ_MAX_DEPTH, 10240, in
	// include/linux/blk-mq.h).
	MaxResultObservedDepth = 10240
	// MaxResultDurationS bounds how long a probe took: a day.
	MaxResultDurationS = 86400
)

// knownScheduler reports whether name is one of mainline Linux's
// schedulers (block/mq-deadline.c, kyber-iosched.c, bfq-iosched.c, and
// "none"): what a probe result may name, so that a decision or advice
// never recommends one that does not exist.
func knownScheduler(name string) bool {
	return sysfs.ValidSchedulerName(name) && slices.Contains(sysfs.MainlineSchedulers(), name)
}

// checkMethod: the method's figures are within a probe's limits
// (probeopt).
func checkMethod(m Method) error {
	switch {
	case m.Depth < 1 || m.Depth > probeopt.MaxDepth:
		return fmt.Errorf("depth %d is outside 1..%d", m.Depth, probeopt.MaxDepth)
	case len(m.Depths) > probeopt.MaxDepths:
		return fmt.Errorf("%d depths: at most %d", len(m.Depths), probeopt.MaxDepths)
	case len(m.Candidates) < 1 || len(m.Candidates) > probeopt.MaxCandidates || len(pairsOf(m.Candidates, m.NrRequests)) < 2:
		return fmt.Errorf("%d candidates: want 2..%d (or one, with two nr_requests)", len(m.Candidates), probeopt.MaxCandidates)
	case len(m.NrRequests) > 0 && len(pairsOf(m.Candidates, m.NrRequests)) > probeopt.MaxPairs:
		return fmt.Errorf("%d candidates x %d nr_requests: at most %d pairs", len(m.Candidates), len(m.NrRequests), probeopt.MaxPairs)
	}
	for i, n := range m.NrRequests {
		if n != probeopt.NrRequestsDefault && (n < probeopt.MinNrRequests || n > probeopt.MaxNrRequests) || slices.Contains(m.NrRequests[:i], n) {
			return fmt.Errorf("nr_requests %s (of nr_requests) is outside %d..%d or named twice", probeopt.NrRequestsText(n), probeopt.MinNrRequests, probeopt.MaxNrRequests)
		}
	}
	for _, d := range m.Depths {
		if d < 1 || d > probeopt.MaxDepth {
			return fmt.Errorf("depth %d (of depths) is outside 1..%d", d, probeopt.MaxDepth)
		}
	}
	if err := probeopt.CheckBlockSize(m.BlockSize); err != nil {
		return fmt.Errorf("block size: %w", err)
	}
	for i, c := range m.Candidates {
		if !knownScheduler(c) {
			return fmt.Errorf("candidate %q is not a scheduler (known: %s)", c, quotedNames(sysfs.MainlineSchedulers()))
		}
		if slices.Contains(m.Candidates[:i], c) {
			return fmt.Errorf("candidate %q named twice", c)
		}
	}
	return nil
}

// checkFigure: v is a finite figure in 0..max.
func checkFigure(what string, v, max float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > max {
		return fmt.Errorf("%s %g is outside 0..%g", what, v, max)
	}
	return nil
}

// checkFigures checks a candidate's (or a round's) figures.
func checkFigures(f Figures) error {
	for _, c := range []struct {
		what   string
		v, max float64
	}{
		{"iops", f.IOPS, MaxResultIOPS}, {"qd1_iops", f.QD1IOPS, MaxResultIOPS},
		{"mib_s", f.MiBs, MaxResultMiBs},
		{"p50_us", f.P50us, MaxResultLatencyUs}, {"p99_us", f.P99us, MaxResultLatencyUs}, {"p999_us", f.P999us, MaxResultLatencyUs},
		{"qd1_p50_us", f.QD1P50, MaxResultLatencyUs}, {"qd1_p99_us", f.QD1P99, MaxResultLatencyUs}, {"qd1_p999_us", f.QD1P999, MaxResultLatencyUs},
		{"cpu_us_per_io", f.CPUPerIOus, MaxResultCPUPerIOus},
	} {
		if err := checkFigure(c.what, c.v, c.max); err != nil {
			return err
		}
	}
	return nil
}

// checkPoint checks one point of a curve.
func checkPoint(p CurvePoint) error {
	for _, c := range []struct {
		what   string
		v, max float64
	}{
		{"observed_depth", p.ObservedDepth, MaxResultObservedDepth}, {"iops", p.IOPS, MaxResultIOPS},
		{"p50_us", p.P50us, MaxResultLatencyUs}, {"p99_us", p.P99us, MaxResultLatencyUs},
	} {
		if err := checkFigure(c.what, c.v, c.max); err != nil {
			return fmt.Errorf("at depth %d: %w", p.Depth, err)
		}
	}
	return nil
}

// quotedNames is names quoted and joined: "none", "mq-deadline".
func quotedNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// SplitErrors is err as the errors errors.Join joined (Seeds.Err's one
// per file or result), each alone; nil for nil.
func SplitErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, SplitErrors(e)...)
		}
		return out
	}
	return []error{err}
}
