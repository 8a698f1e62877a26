package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

func newAdviseCmd(e *env) *cobra.Command {
	var (
		interval time.Duration
		asJSON   bool
		stateDir string
	)
	cmd := &cobra.Command{
		Use:   "advise [DEVICE...] [flags]",
		Short: "Watch disks' operating point and say which scheduler their probe curve favours there",
		Long: `advise samples each disk's /sys/block/DEV/stat over --interval and prints
what the disk did, like iostat -x: its scheduler, reads and writes a second,
the reads' share, the mean request size, the mean latency of a read or
write, how much of the time it was busy, the mean requests in flight over
the interval (depth) and while it was busy (busy depth). Over the same
seconds r/s and w/s are iostat's, DEPTH its aqu-sz and BUSY% its %util
(which iostat does not cap at 100).

Where a probe result for a disk like it exists (--state-dir's probes.json,
else the policy's [daemon] probe_results), advise reads each candidate's
curve at the busy depth and says which the curve favours there, by how
much, and on what basis. A curve is indexed by the depth the disk itself
counted while it was measured, the same count advise reads, so a reader
that asks for depth 32 but keeps fewer requests at the disk (the reader,
not the disk, being the bottleneck) is judged at what the disk saw. The
favoured candidate is compared with the disk's scheduler when that is
another candidate, else with the runner-up:

  loop3: favours none by 50%: at depth 32 the probe measured none 1.50x
  mq-deadline's IOPS (curve of 2026-12-01, remembered)

From the same result, advise says when io_uring handed reads to io-wq
worker threads under the disk's scheduler at the curve point nearest the
busy depth (reads the disk could not take without blocking: no free tag
or scheduler request; see nr_requests), and when the disk took no NOWAIT
reads at all (io_uring then hands every read to a worker).

Without a result it prints the probe command that would measure one,
with its time bound; an idle disk (no I/O completed) gets no verdict.

A disk whose driver takes no NOWAIT I/O is said plainly: io_uring hands
every read and write on it to worker threads.

Read-only: nothing is written, no daemon is needed; a disk's node is
opened only for the NOWAIT test, which reads no data. Without DEVICE,
every disk in /sys/block.

--json: {"interval_s", "devices": [{"name", "scheduler", "iops",
"read_iops", "write_iops", "read_fraction", "mean_size_bytes",
"latency_us", "busy", "queue_depth", "busy_depth", "favoured", "gain",
"basis", "nowait", "nowait_note", "io_worker_runs", "io_worker_runs_depth"}]}: queue_depth is the mean requests in flight over the interval,
busy_depth the same while busy; favoured and gain (0.52 for 1.52x) are
null without a basis, and basis then says why; nowait is null when not
tested, and nowait_note says why, or what no NOWAIT support means.

Exit status: 0; 1 when a disk could not be sampled (it is named, with
why); 2 for a bad flag.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 || interval > 24*time.Hour {
				return &ExitError{Code: 2, Msg: fmt.Sprintf("advise: --interval %s: want more than 0 and at most 24h", interval)}
			}
			fs, err := e.fs()
			if err != nil {
				return err
			}
			names := dedupe(args)
			if len(names) == 0 {
				if names, err = fs.Disks(); err != nil {
					return err
				}
			}
			for _, n := range args {
				d, err := fs.OpenDisk(n)
				if err != nil {
					return &ExitError{Code: 1, Msg: printableLines(err.Error())}
				}
				d.Close()
			}
			// Seeded results come from the policy; a policy that does not
			// load costs advise only those.
			var seeds []string
			if p, err := policy.Load(e.policy); err != nil {
				fmt.Fprintf(e.stderr, "iosched: warning: the policy's seeded probe results are not read: %s\n", printableLines(err.Error()))
			} else {
				seeds = p.Daemon.ProbeResults
			}
			ctx, stop := e.interruptible(context.Background())
			defer stop()
			rows, err := sampleDisks(ctx, fs, names, interval)
			if err != nil {
				return err
			}
			src := &resultSource{stateDir: stateDir, store: probe.OpenStore(stateDir, seeds), defaultDir: stateDir == paths.Default.State, now: time.Now()}
			failed := false
			for i := range rows {
				r := &rows[i]
				if r.err != nil {
					failed = true
					r.Error = r.err.Error()
					continue
				}
				r.judge(fs, src)
				r.testNoWait(fs, advisedNodes{devnode.NodesFor(e.sysfsRoot, e.devDir)})
			}
			warned := map[string]bool{}
			for _, err := range src.errs {
				if msg := err.Error(); !warned[msg] {
					warned[msg] = true
					fmt.Fprintf(e.stderr, "iosched: warning: probe results: %s\n", printableLines(msg))
				}
			}
			if asJSON {
				if err := writeJSON(e.stdout, adviseJSON{IntervalS: interval.Seconds(), Devices: rows}); err != nil {
					return err
				}
			} else {
				renderAdvice(e.stdout, interval, rows)
			}
			if failed {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	// A flag that does not parse is a usage error, as the help says.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: 2, Msg: "advise: " + err.Error()}
	})
	f := cmd.Flags()
	f.DurationVar(&interval, "interval", 10*time.Second, "how long to watch the disks")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&stateDir, "state-dir", paths.Default.State, "where probe results are remembered (the daemon's)")
	return cmd
}

type adviseJSON struct {
	IntervalS float64     `json:"interval_s"`
	Devices   []adviceRow `json:"devices"`
}

// adviceRow is one disk: what it did over the interval, and the verdict.
type adviceRow struct {
	Name          string   `json:"name"`
	Scheduler     string   `json:"scheduler"`
	IOPS          float64  `json:"iops"`
	ReadIOPS      float64  `json:"read_iops"`
	WriteIOPS     float64  `json:"write_iops"`
	ReadFraction  float64  `json:"read_fraction"`
	MeanSizeBytes float64  `json:"mean_size_bytes"`
	LatencyUs     float64  `json:"latency_us"`
	Busy          float64  `json:"busy"`
	QueueDepth    float64  `json:"queue_depth"`
	BusyDepth     float64  `json:"busy_depth"`
	Favoured      *string  `json:"favoured"`
	Gain          *float64 `json:"gain"`
	// Basis is what the verdict rests on, or why there is none.
	Basis string `json:"basis"`
	// NoWait is whether the driver takes NOWAIT I/O (nil: not tested);
	// NoWaitNote why it was not tested, or what its absence means.
	NoWait     *bool  `json:"nowait"`
	NoWaitNote string `json:"nowait_note,omitempty"`
	// IOWorkerRuns is io_uring's hand-offs to io-wq the probe result
	// measured under the current scheduler at the curve's point nearest
	// the busy depth (HandoffDepth); nil when it has no such count.
	IOWorkerRuns *int64 `json:"io_worker_runs,omitempty"`
	HandoffDepth int    `json:"io_worker_runs_depth,omitempty"`
	// Error is why the disk could not be sampled.
	Error string `json:"error,omitempty"`

	point observe.Point
	err   error
}

// sampleDisks reads every disk's stat twice, interval apart (ctx ends
// the wait early: an interrupted advise prints nothing). One open file per
// disk, read once at each end.
func sampleDisks(ctx context.Context, fs sysfs.FS, names []string, interval time.Duration) ([]adviceRow, error) {
	rows := make([]adviceRow, len(names))
	disks := make([]*observe.StatFile, len(names))
	first := make([]observe.Sample, len(names))
	defer func() {
		for _, d := range disks {
			if d != nil {
				d.Close()
			}
		}
	}()
	for i, n := range names {
		rows[i].Name = n
		d, err := observe.Open(observe.StatPath(fs.Root(), n))
		if err == nil {
			first[i], err = d.Read()
		}
		disks[i], rows[i].err = d, err
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, &ExitError{Code: 1, Msg: "advise: " + context.Cause(ctx).Error()}
	case <-t.C:
	}
	for i, d := range disks {
		r := &rows[i]
		if r.err != nil {
			continue
		}
		s, err := d.Read()
		if err == nil {
			r.point, err = observe.Between(first[i], s)
		}
		if err != nil {
			r.err = fmt.Errorf("%s: %w", r.Name, err)
			continue
		}
		p := r.point
		r.IOPS, r.ReadIOPS, r.WriteIOPS = p.IOPS(), p.ReadIOPS, p.WriteIOPS
		r.ReadFraction, r.MeanSizeBytes, r.LatencyUs = p.ReadFraction, p.MeanSizeBytes, p.LatencyUs
		r.Busy, r.QueueDepth, r.BusyDepth = p.Busy, p.QueueDepth, p.BusyDepth
	}
	return rows, nil
}

// judge reads the disk's scheduler and probe result and sets the verdict.
func (r *adviceRow) judge(fs sysfs.FS, src *resultSource) {
	dev, err := fs.DeviceFacts(r.Name, sysfs.FactIdentity|sysfs.FactSize|sysfs.FactHWQueues)
	switch {
	case err != nil:
		r.Scheduler, r.Basis = "?", "not read: "+err.Error()
		return
	case dev.BioBased():
		r.Basis = "no scheduler to choose (bio-based: " + dev.BioBasedBy + ")"
		return
	case dev.Scheduler == nil:
		r.Scheduler, r.Basis = "?", "the disk's scheduler could not be read"
		return
	}
	active, offered := *dev.Scheduler, dev.Schedulers
	r.Scheduler = active
	if r.point.Idle() {
		r.Basis = "idle: no basis"
		return
	}
	rec, from := src.find(fs, dev)
	if rec == nil {
		r.Basis = src.probeHint(r.Name, offered)
		return
	}
	// A busy disk has at least one request in flight; a busy depth below
	// 1 is the kernel's whole milliseconds rounding short requests down.
	v, basis, ok := verdict(rec, from, max(r.point.BusyDepth, 1), active)
	r.Basis = basis
	r.handoffs(rec, active, max(r.point.BusyDepth, 1))
	if ok {
		gain := v.Gain()
		r.Favoured, r.Gain = &v.Favoured, &gain
	}
}

// verdict reads rec's curves at depth, the disk's scheduler being
// current: the favoured candidate and the sentence that says why, or
// (false) why the record gives no verdict.
func verdict(rec *probe.Record, from string, depth float64, current string) (adapt.Verdict, string, bool) {
	curves, order := adapt.Curves(rec.Figures, rec.Depth)
	what := "curve"
	if !slices.ContainsFunc(rec.Figures, func(c probe.Candidate) bool { return len(c.Curve) > 0 }) {
		what = fmt.Sprintf("depths 1 and %d", rec.Depth)
	}
	basis := fmt.Sprintf("%s of %s, %s", what, rec.At.UTC().Format(time.DateOnly), from)
	v, ok := adapt.Favour(curves, order, depth, current)
	if !ok {
		return v, fmt.Sprintf("the probe result (%s) has figures for fewer than two candidates", basis), false
	}
	fav := v.Favoured
	if fav == current {
		fav += " (the current scheduler)"
	}
	return v, fmt.Sprintf("at %s the probe measured %s %.2fx %s's IOPS (%s)",
		v.Where(), fav, v.FavouredIOPS/v.OverIOPS, v.Over, basis), true
}

// resultSource finds a disk's probe result: the newest for its key in
// stateDir's probes.json, else in the seeded files (in glob and name
// order), whatever the method it was measured with; a result measured
// under others' I/O or failing probe.Record.Check is not one.
type resultSource struct {
	stateDir   string
	defaultDir bool
	store      *probe.Store
	now        time.Time
	own        []probe.Record
	seeded     []probe.SeededFile
	read       bool
	errs       []error
}

func (s *resultSource) load() {
	if s.read {
		return
	}
	s.read = true
	var err error
	if s.own, err = s.store.Records(); err != nil {
		s.errs = append(s.errs, err)
	}
	if s.seeded, err = s.store.Seeded(); err != nil {
		s.errs = append(s.errs, err)
	}
}

// find is dev's result and where it came from ("remembered" or
// "seeded from FILE"); nil when none.
func (s *resultSource) find(fs sysfs.FS, dev *sysfs.Device) (*probe.Record, string) {
	s.load()
	key := probe.KeyOf(fs, dev)
	pick := func(recs []probe.Record, file string) *probe.Record {
		var best *probe.Record
		for i := range recs {
			r := &recs[i]
			if r.Key != key || r.Disturbed != "" {
				continue
			}
			if err := r.Check(s.now); err != nil {
				s.errs = append(s.errs, fmt.Errorf("%s: result %d (device %s): not used: %w", file, i+1, r.Device, err))
				continue
			}
			if best == nil || r.At.After(best.At) {
				best = r
			}
		}
		return best
	}
	if r := pick(s.own, s.store.Path()); r != nil {
		return r, "remembered"
	}
	for _, f := range s.seeded {
		if r := pick(f.Results, f.Path); r != nil {
			return r, "seeded from " + f.Path
		}
	}
	return nil, ""
}

// probeHint says there is no result, and the probe that would get one
// with its time bound.
func (s *resultSource) probeHint(name string, offered []string) string {
	o := probe.DefaultOptions()
	o.Candidates = slices.DeleteFunc(slices.Clone(o.Candidates), func(c string) bool { return !slices.Contains(offered, c) })
	if len(o.Candidates) < 2 {
		return fmt.Sprintf("no probe result, and the disk offers fewer than two of the probe's default candidates (%s)",
			strings.Join(probe.DefaultOptions().Candidates, ", "))
	}
	cmd := "iosched probe " + name
	if !s.defaultDir {
		cmd += " --state-dir " + s.stateDir
	}
	return fmt.Sprintf("no probe result for a disk like this one: `%s` measures one (read-only, at most %s if the disk answers at once; it sizes a slower one first and says its bound)",
		cmd, o.Budget().Round(100*time.Millisecond))
}

// handoffs takes from rec the io-wq hand-offs measured under sched at the
// curve point whose observed depth is nearest depth.
func (r *adviceRow) handoffs(rec *probe.Record, sched string, depth float64) {
	for _, c := range rec.Figures {
		if c.Scheduler != sched {
			continue
		}
		best := -1.0
		for _, p := range c.Curve {
			if !p.IOWorkerRuns.Known {
				continue
			}
			if d := math.Abs(p.ObservedDepth - depth); best < 0 || d < best {
				n := p.IOWorkerRuns.N
				best, r.IOWorkerRuns, r.HandoffDepth = d, &n, p.Depth
			}
		}
	}
}

// renderAdvice prints the table, then each disk's verdict.
func renderAdvice(w io.Writer, interval time.Duration, rows []adviceRow) {
	fmt.Fprintf(w, "over %s:\n", interval)
	// Names left, figures right: the two first columns are padded here,
	// as one cell, the rest by the tabwriter.
	nw, sw := len("DEVICE"), len("SCHEDULER")
	for _, r := range rows {
		nw, sw = max(nw, len(printable(r.Name))), max(sw, len(printable(r.Scheduler)))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s  %-*s\tr/s\tw/s\tREAD%%\tSIZE\tLATENCY\tBUSY%%\tDEPTH\tBUSY DEPTH\t\n", nw, "DEVICE", sw, "SCHEDULER")
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		sched := r.Scheduler
		if sched == "" {
			sched = "-"
		}
		size, lat, read := "-", "-", "-"
		if !r.point.Idle() {
			n := uint64(r.MeanSizeBytes + 0.5)
			size, lat, read = humanSize(&n), fmtLatency(r.LatencyUs), fmt.Sprintf("%.0f", 100*r.ReadFraction)
		}
		fmt.Fprintf(tw, "%-*s  %-*s\t%.0f\t%.0f\t%s\t%s\t%s\t%.0f\t%.2f\t%.2f\t\n", nw, printable(r.Name), sw, printable(sched),
			r.ReadIOPS, r.WriteIOPS, read, size, lat, 100*r.Busy, r.QueueDepth, r.BusyDepth)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rows {
		switch {
		case r.err != nil:
			fmt.Fprintf(w, "%s: not sampled: %s\n", printable(r.Name), printableLines(r.Error))
		case r.Favoured != nil:
			fmt.Fprintf(w, "%s: favours %s by %.0f%%: %s\n", printable(r.Name), *r.Favoured, 100**r.Gain, printable(r.Basis))
		default:
			fmt.Fprintf(w, "%s: %s\n", printable(r.Name), printable(r.Basis))
		}
		if r.err != nil {
			continue
		}
		if r.NoWait != nil && !*r.NoWait {
			fmt.Fprintf(w, "%s: %s\n", printable(r.Name), r.NoWaitNote)
		}
		if r.IOWorkerRuns != nil && *r.IOWorkerRuns > 0 {
			fmt.Fprintf(w, "%s: io_uring handed reads to io-wq workers in the probe at depth %d under %s (%d worker runs): reads the disk could not take without blocking (no free tag or scheduler request: see nr_requests)\n",
				printable(r.Name), r.HandoffDepth, printable(r.Scheduler), *r.IOWorkerRuns)
		}
	}
}

func fmtLatency(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.2fms", us/1000)
	}
	return fmt.Sprintf("%.0fµs", us)
}
