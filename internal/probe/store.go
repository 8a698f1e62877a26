package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/probe/probeopt"
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

// ParseKey is the key String showed: the inverse of String, for a key
// read back from a label (iosched_disk_info's key). The model is what
// lies between the driver and the hardware queues, slashes and all; "-"
// is no model and "unknown" no driver, as String writes them.
func ParseKey(s string) (Key, error) {
	f := strings.Split(s, "/")
	if len(f) < 7 {
		return Key{}, fmt.Errorf("key %q: want class/driver/model/hwqN/qdN/SIZEB/kernel", s)
	}
	n := len(f)
	k := Key{Class: f[0], Driver: f[1], Model: strings.Join(f[2:n-4], "/"), Kernel: f[n-1]}
	if k.Driver == "unknown" {
		k.Driver = ""
	}
	if k.Model == "-" {
		k.Model = ""
	}
	var err error
	hwq, ok1 := strings.CutPrefix(f[n-4], "hwq")
	qd, ok2 := strings.CutPrefix(f[n-3], "qd")
	size, ok3 := strings.CutSuffix(f[n-2], "B")
	if ok1 && ok2 && ok3 {
		if k.HWQueues, err = strconv.Atoi(hwq); err == nil {
			if k.QueueDepth, err = strconv.Atoi(qd); err == nil {
				k.SizeBytes, err = strconv.ParseUint(size, 10, 64)
			}
		}
	}
	if !ok1 || !ok2 || !ok3 || err != nil {
		return Key{}, fmt.Errorf("key %q: want class/driver/model/hwqN/qdN/SIZEB/kernel", s)
	}
	return k, nil
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
	// NrRequests are the nr_requests each candidate scheduler was
	// measured with (probeopt.Options.NrRequests); none without that
	// dimension.
	NrRequests []int `json:"nr_requests,omitempty"`
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
	// NoWait is whether the disk took NOWAIT reads when it was probed
	// (Report.NoWait); nil when that was not known.
	NoWait *bool `json:"nowait,omitempty"`
	// Seeded names the file a seeded record was read from, Entry its
	// place in it (1 for the first result); neither is stored.
	Seeded string `json:"-"`
	Entry  int    `json:"-"`
}

// RecordOf is what a finished probe leaves to remember.
func RecordOf(r *Report, at time.Time) Record {
	var cands []string
	for _, c := range r.Candidates {
		if !slices.Contains(cands, c.Scheduler) {
			cands = append(cands, c.Scheduler)
		}
	}
	engine := r.Engine
	return Record{
		Key: r.Key, Serial: r.Serial, Device: r.Device, At: at.UTC(),
		Method:    Method{Engine: engine, Depth: r.Depth, BlockSize: r.BlockSize, Depths: slices.Clone(r.Depths), Candidates: cands, NrRequests: slices.Clone(r.NrRequests)},
		DurationS: r.DurationS, FlatAt: r.FlatAt, Rounds: r.Rounds, Incumbent: r.Incumbent, Figures: r.Candidates,
		Decision: r.Decision, Choose: r.Choose, Margin: r.Margin, Disturbed: r.Disturbed,
		NoWait: r.NoWait,
	}
}

// storeFile is probes.json, and the shape of an exported or seeded file.
type storeFile struct {
	Version int      `json:"version"`
	Results []Record `json:"results"`
	// Kernels holds, in probes.json, when each kernel release was last
	// seen running by a probe that remembered a result (Remember): what
	// tells a kernel no longer booted (prune).
	Kernels map[string]time.Time `json:"kernels,omitempty"`
}

const storeVersion = 1

// Store is the remembered results: StateDir/probes.json, which probes
// write, and seeded files (Seeds), read only.
type Store struct {
	path  string
	seeds *Seeds
	// seedErrs: Lookup returns the seeds' own errors (a file that
	// cannot be read, a result refused) with its own. A store of shared
	// seeds leaves them to whoever reports Seeds.Err once.
	seedErrs bool
}

// OpenStore returns the store of stateDir with the seeded globs ([daemon]
// probe_results), for one command's use. Nothing is read until asked.
func OpenStore(stateDir string, seeded []string) *Store {
	s := NewStore(stateDir, NewSeeds(seeded))
	s.seedErrs = true
	return s
}

// NewStore returns the store of stateDir with seeds, shared with other
// stores of the same policy (see Seeds). Nothing is read until asked.
// Its Lookup leaves out the seeds' own errors (Seeds.Err): they are the
// same for every disk, and reported once by whoever holds the seeds.
func NewStore(stateDir string, seeds *Seeds) *Store {
	if seeds == nil {
		seeds = NewSeeds(nil)
	}
	return &Store{path: filepath.Join(stateDir, "probes.json"), seeds: seeds}
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
	f, err := readStore(path, own, max)
	if err != nil {
		return nil, err
	}
	return f.Results, nil
}

func readStore(path string, own bool, max int64) (*storeFile, error) {
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
	return &f, nil
}

// Check tells whether the record could be a probe's result at time now:
// its figures are each for one of its candidates, once, every name one
// the kernel could have, and it is not dated in the future (a record from
// 2030 would be the newest, and never too old, for years). A seeded file is
// someone else's, and probes.json can be edited: a record that fails is
// not used.
//
// Every scheduler it names must be one of mainline Linux's, and every
// figure finite and within the limits above (MaxResultIOPS and the rest),
// its method within a probe's (probeopt).
func (r *Record) Check(now time.Time) error {
	if err := checkMethod(r.Method); err != nil {
		return err
	}
	if math.IsNaN(r.DurationS) || math.IsInf(r.DurationS, 0) || r.DurationS < 0 || r.DurationS > MaxResultDurationS {
		return fmt.Errorf("duration_s %g is outside 0..%d", r.DurationS, MaxResultDurationS)
	}
	if r.Rounds < 0 || r.Rounds > probeopt.MaxRounds {
		return fmt.Errorf("rounds %d is outside 0..%d", r.Rounds, probeopt.MaxRounds)
	}
	if w := r.Winner; w != "" && !slices.Contains(r.Candidates, w) {
		return fmt.Errorf("winner %q is not one of the candidates %s", w, strings.Join(r.Candidates, ", "))
	}
	seen := map[string]bool{}
	for _, f := range r.Figures {
		if err := checkFigures(f.Figures); err != nil {
			return fmt.Errorf("%s: %w", f.Scheduler, err)
		}
		for _, rf := range f.Rounds {
			if err := checkFigures(rf.Figures); err != nil {
				return fmt.Errorf("%s, round %d: %w", f.Scheduler, rf.Round, err)
			}
		}
		switch {
		case !knownScheduler(f.Scheduler):
			return fmt.Errorf("%q is not a scheduler (known: %s)", f.Scheduler, quotedNames(sysfs.MainlineSchedulers()))
		case !slices.Contains(r.Candidates, f.Scheduler):
			return fmt.Errorf("a figure for %q, which is not one of the candidates %s", f.Scheduler, strings.Join(r.Candidates, ", "))
		case len(r.NrRequests) > 0 && (f.NrRequestsSet <= 0 || !slices.Contains(r.NrRequests, f.NrRequests)):
			return fmt.Errorf("a figure for %q, whose nr_requests %d (set %d) is not one of %s", f.Name(), f.NrRequests, f.NrRequestsSet, fmtInts(r.NrRequests))
		case len(r.NrRequests) == 0 && (f.NrRequests != 0 || f.NrRequestsSet != 0):
			return fmt.Errorf("a figure for %q with an nr_requests, where the record measured none", f.Name())
		case seen[f.Name()]:
			return fmt.Errorf("two figures for %q", f.Name())
		}
		seen[f.Name()] = true
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
		if err := checkPoint(p); err != nil {
			return err
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

// lookupRecords are the remembered results for Lookup: a store of shared
// seeds (the daemon's, a pipeline's) shares, with the seeds, probes.json
// as last decoded while the file stays the same (Remember replaces it by
// a rename: a new inode), so a thousand disks' lookups decode it once.
// The records are shared: Lookup copies the one it returns.
func (s *Store) lookupRecords() ([]Record, error) {
	if s.seedErrs {
		return s.Records()
	}
	return s.seeds.own.records(s.path)
}

// ownCache is probes.json as last decoded, with the identity of the file
// it was read from.
type ownCache struct {
	mu   sync.Mutex
	path string
	id   fileID
	recs []Record
}

// fileID tells one version of a file from another: a rename gives a new
// inode, a write in place a new size or time.
type fileID struct {
	dev, ino     uint64
	size, mtimeN int64
}

func (c *ownCache) records(path string) ([]Record, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	id := fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtimeN: st.Mtim.Nano()}
	// Held while reading: lookups at once wait for one decoding.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == path && c.id == id {
		return c.recs, nil
	}
	recs, err := readStoreFile(path, true, maxStoreFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.path, c.id, c.recs = path, id, recs
	return recs, nil
}

// SeededFile is one seeded file's results that passed Record.Check, each
// with its Entry in the file.
type SeededFile struct {
	Path    string
	Results []Record
}

// Seeded is the seeded files (files of `iosched probe --export`, which
// [daemon] probe_results names by glob), in glob and name order, read
// once (Seeds): at most 64 MiB each, links allowed (an administrator's
// file), format version 1. A glob or file that cannot be read and a
// result refused by Record.Check are errors, after the files that could.
// The files are shared: the caller must not modify them.
func (s *Store) Seeded() ([]SeededFile, error) { return s.seeds.Files() }

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
// another method, or too old). A record of probes.json of the key and
// method that fails Record.Check is not used, and is an error naming the
// file and its place in it, after the lookup (a record found elsewhere is
// still returned). The seeded files' results were checked when read
// (Seeds): their errors come with the lookup's only from a store of its
// own (OpenStore), not from one of shared seeds (NewStore).
func (s *Store) Lookup(key Key, want Want, now time.Time) (*Record, error) {
	var errs []error
	// pick is the newest of recs at positions at (all when nil) that
	// serves want; checked says the records passed Record.Check when
	// read (seeds). The record returned is a copy: seeds are shared.
	pick := func(recs []Record, at []int, checked bool, from, file string, beforeCurves bool) *Record {
		var best *Record
		n := len(recs)
		if at != nil {
			n = len(at)
		}
		for j := 0; j < n; j++ {
			i := j
			if at != nil {
				i = at[j]
			}
			r := &recs[i]
			if r.Key != key {
				continue // first: serves allocates
			}
			if ok, old := r.Method.serves(want.Method); !ok || old != beforeCurves || r.Disturbed != "" {
				continue
			}
			if !checked {
				if err := r.Check(now); err != nil {
					errs = append(errs, fmt.Errorf("%s: result %d (device %s): %w", file, i+1, r.Device, err))
					continue
				}
			}
			if want.MaxAge > 0 && now.Sub(r.At) > want.MaxAge {
				continue
			}
			if best == nil || r.At.After(best.At) {
				best = r
			}
		}
		if best == nil {
			return nil
		}
		rec := *best
		rec.Seeded = from
		rec.Decision = DecideFor(want.Choose, want.Margin, want.Incumbent, !want.FirstCandidate, rec.Figures)
		rec.Choose, rec.Margin, rec.Incumbent = want.Choose, want.Margin, want.Incumbent
		return &rec
	}
	type file struct {
		recs       []Record
		at         []int
		checked    bool
		from, name string
	}
	var files []file
	own, err := s.lookupRecords()
	if err != nil {
		errs = append(errs, err)
	}
	files = append(files, file{recs: own, name: s.path})
	read := func() { // the seeded files, once, and only when needed
		seeded, err := s.Seeded()
		if err != nil && s.seedErrs {
			errs = append(errs, err)
		}
		for i, f := range seeded {
			at := s.seeds.index[i][key]
			if at == nil {
				continue
			}
			files = append(files, file{recs: f.Results, at: at, checked: true, from: f.Path, name: f.Path})
		}
	}
	// With no depths asked, the one pass is of results without a curve.
	passes := []bool{false, true}
	if len(want.Depths) == 0 {
		passes = []bool{true}
	}
	for i, beforeCurves := range passes {
		for j := 0; j < len(files); j++ {
			f := files[j]
			if r := pick(f.recs, f.at, f.checked, f.from, f.name, beforeCurves); r != nil {
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
	return slices.Equal(x, y) && slices.Equal(a.NrRequests, b.NrRequests)
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
// and method (and one of that method from before curves), and prunes the
// file (prune): it keeps the newest result of each key and method, drops
// those of a kernel not seen running for KernelRetention, and keeps the
// file under pruneSize, the oldest results dropped first. The file is
// rewritten atomically under a lock, so probes of several disks at once
// each keep their result.
//
// A probes.json larger than its cap (written before pruning existed) is
// read with a larger one and pruned, not thrown away. One that cannot be
// read is moved aside (probes.json.unreadable-TIME) and rec starts a new
// one: kept in place, it would fail every later Remember. rec is then
// stored, and the error returned says what was moved where, for a
// warning.
func (s *Store) Remember(rec Record) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	f, rerr := readStore(s.path, true, maxStoreFile)
	if errors.Is(rerr, fileio.ErrTooLarge) {
		f, rerr = readStore(s.path, true, maxOversizedStoreFile)
	}
	var aside error
	switch {
	case errors.Is(rerr, os.ErrNotExist):
		f = &storeFile{}
	case rerr != nil:
		to := fmt.Sprintf("%s.unreadable-%s", s.path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if err := os.Rename(s.path, to); err != nil {
			return fmt.Errorf("%w; moving it aside: %w", rerr, err)
		}
		aside = fmt.Errorf("earlier results unreadable (%w): moved aside to %s, this result starts a new file", rerr, to)
		f = &storeFile{}
	}
	// A result of the same curve replaces the older, and so does any
	// result with a curve one from before curves.
	recs := slices.DeleteFunc(f.Results, func(r Record) bool {
		ok, _ := r.Method.serves(rec.Method)
		return r.Key == rec.Key && ok
	})
	recs = append(recs, rec)
	kernels := f.Kernels
	if kernels == nil {
		kernels = map[string]time.Time{}
	}
	if k := rec.Key.Kernel; k != "" {
		if _, seen := kernels[k]; !seen {
			// The first result under this kernel: the others ran
			// until it booted, as far as the file can tell, so their
			// retention starts now, not at their last result.
			for _, r := range recs {
				if r.Key.Kernel != k && rec.At.After(kernels[r.Key.Kernel]) {
					kernels[r.Key.Kernel] = rec.At
				}
			}
		}
		if rec.At.After(kernels[k]) {
			kernels[k] = rec.At
		}
	}
	b, err := prune(recs, kernels, rec.Key.Kernel, rec.At, pruneSize)
	if err == nil {
		err = fileio.WriteWith(s.path, b, fileio.Options{Sync: true})
	}
	if err != nil {
		return errors.Join(aside, err)
	}
	return aside
}

// KernelRetention is how long the results of a kernel release no longer
// seen running are kept: a machine that boots back into an older kernel
// within it (a rollback, a dual boot) still finds them.
const KernelRetention = 30 * 24 * time.Hour

// Sizes of probes.json: prune keeps it under pruneSize, well below
// maxStoreFile, the most it is read at; one over that (written before
// pruning) is read at up to maxOversizedStoreFile to be pruned.
const (
	pruneSize             = maxStoreFile * 3 / 4
	maxOversizedStoreFile = 4 * maxStoreFile
)

// prune is probes.json's content for recs: the newest result of each key
// and method, without those of kernels other than running that neither
// ran nor were probed within KernelRetention before now (kernels holds
// when each last ran), and, while the file would be larger than max, with
// the oldest results dropped, the newest always kept.
func prune(recs []Record, kernels map[string]time.Time, running string, now time.Time, max int) ([]byte, error) {
	newest := map[string]int{}
	var kept []Record
	for _, r := range recs {
		id := r.Key.String() + "\x00" + methodID(r.Method)
		if i, ok := newest[id]; ok {
			if r.At.After(kept[i].At) {
				kept[i] = r
			}
			continue
		}
		newest[id] = len(kept)
		kept = append(kept, r)
	}
	lastRan := maps.Clone(kernels)
	for _, r := range kept {
		if r.At.After(lastRan[r.Key.Kernel]) {
			lastRan[r.Key.Kernel] = r.At
		}
	}
	kept = slices.DeleteFunc(kept, func(r Record) bool {
		k := r.Key.Kernel
		return k != running && now.Sub(lastRan[k]) > KernelRetention
	})
	for k, at := range kernels {
		if k != running && now.Sub(at) > KernelRetention {
			delete(kernels, k)
		}
	}
	// Oldest first: what the size cap drops.
	slices.SortStableFunc(kept, func(a, b Record) int { return a.At.Compare(b.At) })
	for {
		b, err := encodeStore(storeFile{Version: storeVersion, Results: kept, Kernels: kernels})
		if err != nil || len(b) <= max || len(kept) <= 1 {
			return b, err
		}
		// Drop the share of results the excess is, and one more.
		drop := min(len(kept)-1, int(int64(len(kept))*int64(len(b)-max)/int64(len(b)))+1)
		kept = kept[drop:]
	}
}

// methodID identifies a method: the same engine, depth, block size,
// curve depths and set of candidates.
func methodID(m Method) string {
	c := slices.Clone(m.Candidates)
	slices.Sort(c)
	return fmt.Sprintf("%s/%d/%d/%s/%s", m.Engine, m.Depth, m.BlockSize, fmtInts(m.Depths), strings.Join(c, ","))
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

// WriteResults writes recs to path in the shape [daemon] probe_results
// reads (a seeded file), as Export does.
func WriteResults(path string, recs []Record) error {
	if recs == nil {
		recs = []Record{}
	}
	return writeStore(path, recs)
}

func writeStore(path string, recs []Record) error {
	b, err := encodeStore(storeFile{Version: storeVersion, Results: recs})
	if err != nil {
		return err
	}
	return fileio.WriteWith(path, b, fileio.Options{Sync: true})
}

func encodeStore(f storeFile) ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
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
