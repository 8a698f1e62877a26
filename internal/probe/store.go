package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/sysfs"
)

// Key is what makes two disks behave alike for a probe: the same kind of
// device, with the same queues and size, under the same kernel. A serial
// number is not part of it, so identical disks (ten thousand VMs of one
// image) share one result.
type Key struct {
	Class  string `json:"class"`
	Driver string `json:"driver"`
	Model  string `json:"model"`
	// HWQueues is -1 when the tree does not say (no mq/ directory).
	HWQueues int `json:"hw_queues"`
	// QueueDepth is the hardware queue's tag count (mq/0/nr_tags): what
	// the device takes at once, whatever the scheduler.
	QueueDepth int    `json:"queue_depth"`
	SizeBytes  uint64 `json:"size_bytes"`
	Kernel     string `json:"kernel"`
}

// String is the key as reports show it ("remembered_as").
func (k Key) String() string {
	model := k.Model
	if model == "" {
		model = "-"
	}
	return fmt.Sprintf("%s/%s/%s/hwq%d/qd%d/%dB/%s", k.Class, orUnknown(k.Driver), model, k.HWQueues, k.QueueDepth, k.SizeBytes, k.Kernel)
}

// KeyOf is d's key. d must have been read with sysfs.FactAll (or at least
// identity, size and hardware queues).
func KeyOf(fs sysfs.FS, d *sysfs.Device) Key {
	k := Key{Class: string(d.Class), Driver: d.Driver, Model: d.Model, HWQueues: -1, Kernel: kernelRelease()}
	if d.HWQueues != nil {
		k.HWQueues = *d.HWQueues
	}
	if d.SizeBytes != nil {
		k.SizeBytes = *d.SizeBytes
	}
	if b, err := fileio.Read(filepath.Join(fs.Root(), "block", d.Name, "mq", "0", "nr_tags"), 4096); err == nil {
		k.QueueDepth, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return k
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Method is how a result was measured; a remembered result is reused only
// for the same method (the choice and margin can differ: the decision is
// made again from its figures). See Method.serves for the curve's depths.
type Method struct {
	Engine    string `json:"engine"`
	Depth     int    `json:"depth"`
	BlockSize int    `json:"block_size"`
	// Depths are the curve's, as measured (capped at the disk's queue
	// depth); none in a result remembered before probes measured
	// curves.
	Depths     []int    `json:"depths,omitempty"`
	Candidates []string `json:"candidates"`
}

// Record is one remembered probe result.
type Record struct {
	Key    Key       `json:"key"`
	Serial string    `json:"serial,omitempty"`
	Device string    `json:"device"`
	At     time.Time `json:"at"`
	Method
	// FlatAt: see Report.FlatAt.
	FlatAt    int         `json:"flat_at,omitempty"`
	DurationS float64     `json:"duration_s"`
	Rounds    int         `json:"rounds"`
	Incumbent string      `json:"incumbent"`
	Figures   []Candidate `json:"figures"`
	Decision
	Choose string  `json:"choose"`
	Margin float64 `json:"margin"`
	// Disturbed says how others used the disk while it was measured
	// (Report.Disturbed): such a result is kept and shown, but Lookup
	// never returns it, so the daemon (and a probe without --fresh)
	// measure the disk again, once it is idle.
	Disturbed string `json:"disturbed,omitempty"`
	// Seeded names the file a seeded record was read from; not stored.
	Seeded string `json:"-"`
}

// RecordOf is what a finished probe leaves to remember.
func RecordOf(r *Report, at time.Time) Record {
	cands := make([]string, len(r.Candidates))
	for i, c := range r.Candidates {
		cands[i] = c.Scheduler
	}
	engine := r.Engine
	return Record{
		Key: r.Key, Serial: r.Serial, Device: r.Device, At: at.UTC(),
		Method:    Method{Engine: engine, Depth: r.Depth, BlockSize: r.BlockSize, Depths: slices.Clone(r.Depths), Candidates: cands},
		DurationS: r.DurationS, FlatAt: r.FlatAt, Rounds: r.Rounds, Incumbent: r.Incumbent, Figures: r.Candidates,
		Decision: r.Decision, Choose: r.Choose, Margin: r.Margin, Disturbed: r.Disturbed,
	}
}

// storeFile is probes.json, and the shape of an exported or seeded file.
type storeFile struct {
	Version int      `json:"version"`
	Results []Record `json:"results"`
}

const storeVersion = 1

// Store is the remembered results: StateDir/probes.json, which probes
// write, and seeded files (globs), read only.
type Store struct {
	path   string
	seeded []string
}

// OpenStore returns the store of stateDir with the seeded globs ([daemon]
// probe_results). Nothing is read until asked.
func OpenStore(stateDir string, seeded []string) *Store {
	return &Store{path: filepath.Join(stateDir, "probes.json"), seeded: slices.Clone(seeded)}
}

// Path is probes.json's path.
func (s *Store) Path() string { return s.path }

// Size caps of the files a store reads: probes.json holds one record of a
// few KiB for each kind of disk a machine has (identical disks share one);
// a seeded file, one for each kind of a fleet's machines.
const (
	maxStoreFile = 16 << 20
	maxSeedFile  = 64 << 20
)

// readStoreFile reads probes.json (own: iosched writes it, a link there is
// refused) or a seeded file (an administrator's, perhaps a link) of at
// most max bytes.
func readStoreFile(path string, own bool, max int64) ([]Record, error) {
	read := fileio.Read
	if own {
		read = fileio.ReadNoFollow
	}
	b, err := read(path, max)
	if err != nil {
		return nil, err
	}
	var f storeFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Version != storeVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", path, f.Version, storeVersion)
	}
	return f.Results, nil
}

// Check tells whether the record could be a probe's result at time now:
// its figures are each for one of its candidates, once, every name one
// the kernel could have, and it is not dated in the future (a record from
// 2030 would be the newest, and never too old, for years). A seeded file is
// someone else's, and probes.json can be edited: a record that fails is
// not used.
func (r *Record) Check(now time.Time) error {
	for _, c := range r.Candidates {
		if !sysfs.ValidSchedulerName(c) {
			return fmt.Errorf("candidate %q is not a scheduler name", c)
		}
	}
	seen := map[string]bool{}
	for _, f := range r.Figures {
		switch {
		case !sysfs.ValidSchedulerName(f.Scheduler):
			return fmt.Errorf("%q is not a scheduler name", f.Scheduler)
		case !slices.Contains(r.Candidates, f.Scheduler):
			return fmt.Errorf("a figure for %q, which is not one of the candidates %s", f.Scheduler, strings.Join(r.Candidates, ", "))
		case seen[f.Scheduler]:
			return fmt.Errorf("two figures for %q", f.Scheduler)
		}
		seen[f.Scheduler] = true
		if err := checkCurve(f.Curve, r.Depths); err != nil {
			return fmt.Errorf("%s's curve: %w", f.Scheduler, err)
		}
	}
	if r.At.After(now) {
		return fmt.Errorf("dated %s, in the future", r.At.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkCurve: a curve, when there is one, has a point at each of the
// record's depths, in their order, with no negative figure.
func checkCurve(curve []CurvePoint, depths []int) error {
	if len(curve) == 0 {
		return nil
	}
	got := make([]int, len(curve))
	for i, p := range curve {
		got[i] = p.Depth
		if p.ObservedDepth < 0 || p.IOPS < 0 || p.P50us < 0 || p.P99us < 0 {
			return fmt.Errorf("a negative figure at depth %d", p.Depth)
		}
	}
	if !slices.Equal(got, depths) {
		return fmt.Errorf("points at depths %s, where the record's depths are %s", fmtInts(got), fmtInts(depths))
	}
	return nil
}

func fmtInts(xs []int) string { return "[" + joinInts(xs) + "]" }

// Records are the remembered results (not the seeded ones).
func (s *Store) Records() ([]Record, error) {
	recs, err := readStoreFile(s.path, true, maxStoreFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return recs, err
}

// SeededFile is one seeded file's results, as written: Record.Check says
// which of them may be used.
type SeededFile struct {
	Path    string
	Results []Record
}

// Seeded reads the seeded files (files of `iosched probe --export`, which
// [daemon] probe_results names by glob), in glob and name order, with the
// checks of Lookup: at most 64 MiB each, links allowed (an
// administrator's file), format version 1. A glob or file that cannot be
// read is an error, after the files that could.
func (s *Store) Seeded() ([]SeededFile, error) {
	var files []SeededFile
	var errs []error
	for _, g := range s.seeded {
		names, err := filepath.Glob(g)
		if err != nil {
			errs = append(errs, fmt.Errorf("probe_results %q: %w", g, err))
			continue
		}
		slices.Sort(names)
		for _, f := range names {
			recs, err := readStoreFile(f, false, maxSeedFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("seeded probe results: %w", err))
				continue
			}
			files = append(files, SeededFile{f, recs})
		}
	}
	return files, errors.Join(errs...)
}

// Want is what a lookup asks for.
type Want struct {
	Method
	Choose string
	Margin float64
	// MaxAge: an older result is not used (0: any age).
	MaxAge time.Duration
	// Incumbent is the disk's current scheduler when a candidate, else
	// the first candidate: who a challenger must beat.
	Incumbent string
	// FirstCandidate: Incumbent is the first candidate, not the disk's
	// scheduler (see DecideFor).
	FirstCandidate bool
}

// Lookup finds the result for key measured by want's method, the newest
// of probes.json first, then of the seeded files in glob and name order;
// its decision is made again with want's choice and margin. A result with
// want's curve is taken before one from before curves (see Method.serves),
// wherever each is. It returns nil when there is none (a changed key,
// another method, or too old). A seeded file that cannot be read is an
// error, after the lookup (a record found elsewhere is still returned), and
// so is a record of the key and method that fails Record.Check: it is not
// used, and the error names its file and its place in it.
func (s *Store) Lookup(key Key, want Want, now time.Time) (*Record, error) {
	var errs []error
	pick := func(recs []Record, from, file string, beforeCurves bool) *Record {
		var best *Record
		for i := range recs {
			r := &recs[i]
			if ok, old := r.Method.serves(want.Method); r.Key != key || !ok || old != beforeCurves || r.Disturbed != "" {
				continue
			}
			if err := r.Check(now); err != nil {
				errs = append(errs, fmt.Errorf("%s: result %d (device %s): %w", file, i+1, r.Device, err))
				continue
			}
			if want.MaxAge > 0 && now.Sub(r.At) > want.MaxAge {
				continue
			}
			if best == nil || r.At.After(best.At) {
				best = r
			}
		}
		if best != nil {
			best.Seeded = from
			best.Decision = DecideFor(want.Choose, want.Margin, want.Incumbent, !want.FirstCandidate, best.Figures)
			best.Choose, best.Margin, best.Incumbent = want.Choose, want.Margin, want.Incumbent
		}
		return best
	}
	type file struct {
		recs       []Record
		from, name string
	}
	var files []file
	own, err := s.Records()
	if err != nil {
		errs = append(errs, err)
	}
	files = append(files, file{own, "", s.path})
	read := func() { // the seeded files, once, and only when needed
		seeded, err := s.Seeded()
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range seeded {
			files = append(files, file{f.Results, f.Path, f.Path})
		}
	}
	// With no depths asked, the one pass is of results without a curve.
	passes := []bool{false, true}
	if len(want.Depths) == 0 {
		passes = []bool{true}
	}
	for i, beforeCurves := range passes {
		for j := 0; j < len(files); j++ {
			if r := pick(files[j].recs, files[j].from, files[j].name, beforeCurves); r != nil {
				return r, errors.Join(errs...)
			}
			if i == 0 && j == 0 {
				read()
			}
		}
	}
	return nil, errors.Join(errs...)
}

// sameBase: the same engine, depth and block size, and the same set of
// candidates in any order.
func sameBase(a, b Method) bool {
	if a.Engine != b.Engine || a.Depth != b.Depth || a.BlockSize != b.BlockSize || len(a.Candidates) != len(b.Candidates) {
		return false
	}
	x, y := slices.Clone(a.Candidates), slices.Clone(b.Candidates)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// serves says whether a result measured by m serves a lookup for want:
// the same engine, deep-queue depth, block size and candidates, and
// either the same curve depths, or none (beforeCurves: a result from
// before probes measured curves, whose figures at depth 1 and the deep
// depth are what the decision reads, and which counts as those two points
// for a curve: Candidate.Points). A result with another curve is not
// reused: its curve is not the one asked for.
func (m Method) serves(want Method) (ok, beforeCurves bool) {
	switch {
	case !sameBase(m, want):
		return false, false
	case len(m.Depths) == 0:
		return true, true
	}
	return slices.Equal(m.Depths, want.Depths), false
}

// Remember adds rec to probes.json, replacing any result of the same key
// and method (and one of that method from before curves). The file is rewritten atomically under a lock, so probes of
// several disks at once each keep their result.
//
// A probes.json that cannot be read is moved aside
// (probes.json.unreadable-TIME) and rec starts a new one: kept in place,
// it would fail every later Remember. rec is then stored, and the error
// returned says what was moved where, for a warning.
func (s *Store) Remember(rec Record) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	recs, rerr := s.Records()
	var aside error
	if rerr != nil {
		to := fmt.Sprintf("%s.unreadable-%s", s.path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if err := os.Rename(s.path, to); err != nil {
			return fmt.Errorf("%w; moving it aside: %w", rerr, err)
		}
		aside = fmt.Errorf("earlier results unreadable (%w): moved aside to %s, this result starts a new file", rerr, to)
		recs = nil
	}
	// A result of the same curve replaces the older, and so does any
	// result with a curve one from before curves.
	recs = slices.DeleteFunc(recs, func(r Record) bool {
		ok, _ := r.Method.serves(rec.Method)
		return r.Key == rec.Key && ok
	})
	recs = append(recs, rec)
	if err := writeStore(s.path, recs); err != nil {
		return errors.Join(aside, err)
	}
	return aside
}

// Export writes the remembered results to path, in the shape [daemon]
// probe_results reads.
func (s *Store) Export(path string) (int, error) {
	recs, err := s.Records()
	if err != nil {
		return 0, err
	}
	if recs == nil {
		recs = []Record{}
	}
	return len(recs), writeStore(path, recs)
}

func writeStore(path string, recs []Record) error {
	b, err := json.MarshalIndent(storeFile{Version: storeVersion, Results: recs}, "", "  ")
	if err != nil {
		return err
	}
	return fileio.WriteWith(path, append(b, '\n'), fileio.Options{Sync: true})
}

func (s *Store) lock() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}
