package metrics

import (
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Label values outside a known set are counted under "other", so a label
// set stays bounded whatever the kernel or a forged message sends.

// Uevent actions and sources, and rescan reasons, as counted (index order).
func actions() []string { return []string{"add", "change", "remove", "other"} }
func sources() []string { return []string{"kernel", "udev", "other"} }
func reasons() []string { return []string{"start", "overflow", "reconcile", "reload", "other"} }

func actionIndex(a string) int {
	switch a {
	case "add":
		return 0
	case "change":
		return 1
	case "remove":
		return 2
	}
	return 3
}

func sourceIndex(s string) int {
	switch s {
	case "kernel":
		return 0
	case "udev":
		return 1
	}
	return 2
}

func reasonIndex(r string) int {
	switch r {
	case "start":
		return 0
	case "overflow":
		return 1
	case "reconcile":
		return 2
	case "reload":
		return 3
	}
	return 4
}

// Options configure a Recorder.
type Options struct {
	// Path is the file to write; empty writes nothing (the recorder still
	// counts, and keeps the last burst's latency). SetPath changes it.
	Path string
	// Version is the release recorded in iosched_build_info.
	Version string
	// Interval is the least time between two writes; default one second.
	Interval time.Duration
	// RemoveAtEnd: when Run ends, the file is removed instead of written
	// a last time. A file left behind keeps its last values for ever,
	// and node_exporter would go on exporting them as a live daemon's.
	RemoveAtEnd bool
	// Log gets a line when writing the file starts failing (once, not
	// on every try), when it works again, and when an old file cannot be
	// removed; nil logs nothing.
	Log *slog.Logger
}

// Recorder counts the daemon's work. Its methods are safe to call from any
// goroutine at once.
type Recorder struct {
	opts Options
	// pending: something was recorded since the last write began; the
	// record that sets it wakes the writer, which sleeps while nothing
	// happens (no timer ticks on an idle machine).
	pending atomic.Bool
	// settled are the rendered families of settledFamilies, nil when one
	// of them changed since; guarded by mu.
	settled []*family
	// out is the last file written, its buffer the next one's; only
	// Run's goroutine uses it.
	out  []byte
	wake chan struct{}
	// holds counts the Holds not yet released: while one is, a record
	// marks the file out of date without waking the writer.
	holds atomic.Int32

	uevents   [4][3]atomic.Uint64 // [action][source]
	rescans   [5]atomic.Uint64    // [reason]
	overflows atomic.Uint64
	loadErrs  atomic.Uint64

	changes      sync.Map // attrRule -> *atomic.Uint64
	applyErrors  sync.Map // attribute -> *atomic.Uint64
	driftRepairs sync.Map // attribute -> *atomic.Uint64
	// adaptSwitches: adaptSwitchKey -> *atomic.Uint64
	adaptSwitches sync.Map

	latency histogram
	burst   burstLog

	mu       sync.Mutex // guards what follows
	path     string
	disks    map[DiskKind]int
	reloaded bool
	reloadOK bool
	reloadAt time.Time
	probes   map[string][]ProbeResult // by disk
	adapt    map[string]adaptDepths   // by disk
	busy     map[string]BusyDepths    // by observed disk
	info     map[string]DiskInfo      // by observed disk
	curves   map[string]ProbeCurves   // by disk
	writeErr error
	// written is the file last written, "" when none is there: the one
	// to remove once the path moves or writing ends.
	written string
}

type attrRule struct{ attribute, rule string }

// DiskKind groups managed disks for iosched_disks_managed.
type DiskKind struct {
	Class     string
	Scheduler string // "" on a bio-based disk: shown as "none"
}

// ProbeResult is one scheduler's figures from a probe of one disk.
type ProbeResult struct {
	Scheduler string
	// IOPS is the deep-queue read rate, QD1IOPS the rate at depth 1.
	IOPS, QD1IOPS float64
	// P99 is the deep-queue read latency's 99th percentile, QD1P99 at
	// depth 1.
	P99, QD1P99 time.Duration
	// Chosen marks the scheduler the probe decided on.
	Chosen bool
}

// New makes a recorder. It reports only its own counts, nothing of the Go
// runtime or the process: node_exporter reports the machine.
func New(opts Options) *Recorder {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		opts:   opts,
		path:   opts.Path,
		wake:   make(chan struct{}, 1),
		disks:  map[DiskKind]int{},
		probes: map[string][]ProbeResult{},
		adapt:  map[string]adaptDepths{},
	}
	return r
}

// Uevent counts a uevent the daemon received, by action (add, change,
// remove) and source (kernel, udev).
func (r *Recorder) Uevent(action, source string) {
	r.uevents[actionIndex(action)][sourceIndex(source)].Add(1)
	r.mark()
}

// Rescan counts a scan of every disk, by reason: start, overflow,
// reconcile, reload.
func (r *Recorder) Rescan(reason string) {
	r.rescans[reasonIndex(reason)].Add(1)
	r.mark()
}

// Overflow counts an overflow of the uevent socket (ENOBUFS): uevents were
// lost, and a rescan follows.
func (r *Recorder) Overflow() {
	r.overflows.Add(1)
	r.mark()
}

// Changed counts a value written and kept, by attribute and by the rule
// that set it; drift marks a repair of a value the policy had already set.
func (r *Recorder) Changed(attribute, rule string, drift bool) {
	add(&r.changes, attrRule{attribute, rule})
	if drift {
		add(&r.driftRepairs, attribute)
	}
	r.mark()
}

// ApplyFailed counts a write that failed or that the kernel did not keep.
func (r *Recorder) ApplyFailed(attribute string) {
	add(&r.applyErrors, attribute)
	r.mark()
}

// Applied records the time from a disk's uevent (received) to its
// settings applied (now), in the histogram and in the last burst.
func (r *Recorder) Applied(received time.Time) {
	now := time.Now()
	d := now.Sub(received)
	r.latency.observe(d)
	r.burst.add(now, d)
	r.mark()
}

// Reloaded records a policy load after start: err nil when the new policy
// is in force, else the load's failure (counted as a policy load error; the
// old policy stays).
func (r *Recorder) Reloaded(err error) {
	if err != nil {
		r.loadErrs.Add(1)
	}
	r.mu.Lock()
	r.reloaded, r.reloadOK, r.reloadAt = true, err == nil, time.Now()
	r.mu.Unlock()
	r.mark()
}

// SetDisks replaces the count of managed disks by class and scheduler. It
// is meant for when the set of disks or their schedulers changed, not for
// every pass; an unchanged count marks nothing to write.
func (r *Recorder) SetDisks(counts map[DiskKind]int) {
	clean := make(map[DiskKind]int, len(counts))
	for k, n := range counts {
		if k.Scheduler == "" {
			k.Scheduler = "none"
		}
		if n > 0 {
			clean[k] += n
		}
	}
	r.mu.Lock()
	same := maps.Equal(r.disks, clean)
	r.disks = clean
	r.mu.Unlock()
	if !same {
		r.mark()
	}
}

// SetProbe replaces a disk's probe figures, one entry per scheduler
// measured.
func (r *Recorder) SetProbe(disk string, results []ProbeResult) {
	r.mu.Lock()
	r.probes[disk] = append([]ProbeResult(nil), results...)
	r.settled = nil
	r.mu.Unlock()
	r.mark()
}

// ForgetProbe drops a disk's probe figures (the disk went away), so a
// machine whose disks come and go does not grow the file without end.
func (r *Recorder) ForgetProbe(disk string) {
	r.mu.Lock()
	_, had := r.probes[disk]
	_, hadCurves := r.curves[disk]
	had = had || hadCurves
	delete(r.probes, disk)
	delete(r.curves, disk)
	if had {
		r.settled = nil
	}
	r.mu.Unlock()
	if had {
		r.mark()
	}
}

// adaptDepths are an adaptive disk's depths now.
type adaptDepths struct{ busy, window float64 }

type adaptSwitchKey struct {
	scheduler string
	guard     bool
}

// AdaptSwitched counts an adaptive switch of a disk's scheduler to
// scheduler ([rule.adapt]); guard marks the guard rail's switch back. The
// disk is not a label: a counter's series would outlive the disk (the
// depths are per disk, gauges dropped with it).
func (r *Recorder) AdaptSwitched(scheduler string, guard bool) {
	add(&r.adaptSwitches, adaptSwitchKey{scheduler, guard})
	r.mark()
}

// SetAdaptDepth records an adaptive disk's depths: the last sample's mean
// requests in flight while busy, and its window's operating point. Values
// that did not change mark nothing to write.
func (r *Recorder) SetAdaptDepth(disk string, busyDepth, windowDepth float64) {
	d := adaptDepths{busyDepth, windowDepth}
	r.mu.Lock()
	old, had := r.adapt[disk]
	same := had && old == d
	r.adapt[disk] = d
	r.mu.Unlock()
	if !same {
		r.mark()
	}
}

// ForgetAdapt drops a disk's adaptive series: the disk went away, or no
// adaptive rule matches it any more.
func (r *Recorder) ForgetAdapt(disk string) {
	r.mu.Lock()
	_, had := r.adapt[disk]
	delete(r.adapt, disk)
	r.mu.Unlock()
	if had {
		r.mark()
	}
}

// mark notes that the file is out of date. Only the first record after a
// write wakes the writer: the rest of a burst costs an atomic load each.
// Under a Hold the release wakes it instead.
func (r *Recorder) mark() {
	if !r.pending.Load() && r.pending.CompareAndSwap(false, true) && r.holds.Load() == 0 {
		r.wakeWriter()
	}
}

func (r *Recorder) wakeWriter() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Hold keeps what is recorded until the returned release from waking the
// writer: a pass of a sampler over 1000 disks whose figures all changed
// makes one write after it, not one at its first record (while the rest
// are still coming) and another an Interval later. Release once; holds
// nest.
func (r *Recorder) Hold() (release func()) {
	r.holds.Add(1)
	return func() {
		if r.holds.Add(-1) == 0 && r.pending.Load() {
			r.wakeWriter()
		}
	}
}

func add[K comparable](m *sync.Map, k K) {
	c, ok := m.Load(k)
	if !ok {
		c, _ = m.LoadOrStore(k, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(1)
}

// buildInfo is the version, VCS revision and Go release of this binary.
func buildInfo(version string) (v, revision, goVersion string) {
	v, revision, goVersion = version, "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goVersion = bi.GoVersion
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	if v == "" {
		v = bi.Main.Version
	}
	return
}
