package probe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
)

// Runner is what `iosched probe` and the daemon use: a remembered decision
// when there is one, else a probe whose result is remembered.
//
// The daemon's use: at start, RecoverInterrupted(stateDir, locks, fs); for a disk
// a [rule.probe] matches (policy.Policy.ProbeFor), Lookup with
// FromPolicy(rule) and the rule's MaxAge; without a decision, Probe it in
// the background (at most [daemon] probe_concurrency at once, within
// probe_budget), cancelling ctx on reload or removal, then apply
// Decision.Winner with Decision.Provenance as its reason.
type Runner struct {
	FS       sysfs.FS
	DevDir   string
	StateDir string
	// Locks is the machine's lock of disks (disklock.New("") when nil).
	Locks *disklock.Locks
	Store *Store
	// Progress, when set, is told each step of a probe.
	Progress func(string)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Procs, when set, is asked for n goroutines running at once
	// (runtime.GOMAXPROCS) before a probe whose engine needs them (psync:
	// one per reader), and what it returns is called when the probe ends.
	// GOMAXPROCS is the process's, so the probe does not set it: the
	// process's owner decides (procs.Raiser.Raise in the daemon and
	// `iosched probe`). Nil runs with what the process has.
	Procs func(n int) (release func())
	// InFlight, when set, records the probes' writes while they run
	// (Target.InFlight).
	InFlight *tasks.Writes
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Lookup returns the remembered (or seeded) decision for the disk dev
// (read with sysfs.FactAll) probed with o, nil when there is none younger
// than maxAge (0: any age). The report it returns has From set and no
// measurement of its own.
func (r *Runner) Lookup(dev *sysfs.Device, o Options, maxAge time.Duration) (*Report, error) {
	o.fill()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	engine, err := EngineName(o.Engine)
	if err != nil {
		return nil, err
	}
	var offered []string
	for _, c := range o.Candidates {
		if slices.Contains(dev.Schedulers, c) {
			offered = append(offered, c)
		}
	}
	if len(pairsOf(offered, o.NrRequests)) < 2 {
		return nil, nil
	}
	key := KeyOf(r.FS, dev)
	want := Want{
		// The depths a probe of this disk measures (Run caps them the
		// same way).
		Method: Method{Engine: engine, Depth: o.Depth, BlockSize: o.BlockSize, Depths: CapDepths(o.Depths, key.QueueDepth), Candidates: offered,
			NrRequests: slices.Clone(o.NrRequests)},
		Choose: o.Choose, Margin: o.Margin, MaxAge: maxAge,
	}
	sched, nr := "", 0
	if dev.Scheduler != nil {
		sched = *dev.Scheduler
	}
	if v, ok := dev.Value("nr_requests"); ok {
		nr, _ = strconv.Atoi(v)
	}
	var onDisk bool
	want.Incumbent, onDisk = incumbentOf(offered, o.NrRequests, sched, nr, key.QueueDepth)
	want.FirstCandidate = !onDisk
	rec, err := r.Store.Lookup(key, want, r.now())
	if rec == nil && err == nil {
		rec, err = r.lookupFlat(key, want)
	}
	if rec == nil {
		return nil, err
	}
	rep := rec.report()
	rep.Device = dev.Name
	if dev.Scheduler != nil {
		rep.Original = *dev.Scheduler
	}
	return rep, err
}

// Probe returns the remembered decision for the disk unless fresh, else
// runs a probe (Run) and remembers its result. With o.Apply a remembered
// winner is set on the disk too.
func (r *Runner) Probe(ctx context.Context, disk sysfs.Name, o Options, fresh bool, maxAge time.Duration) (*Report, error) {
	name := disk.String()
	if !fresh {
		dev, err := r.FS.Device(name)
		if err != nil && !errors.Is(err, sysfs.ErrNoDevice) {
			return nil, err
		}
		if dev != nil && !dev.BioBased() {
			rep, err := r.Lookup(dev, o, maxAge)
			if err != nil && r.Progress != nil {
				r.Progress(err.Error())
			}
			if rep != nil {
				if o.Apply && dev.Scheduler != nil && *dev.Scheduler != rep.Winner {
					if err := setScheduler(r.FS, name, rep.Winner); err != nil {
						return rep, err
					}
					rep.Applied = rep.Winner
				}
				if o.Apply && rep.WinnerNr > 0 {
					// After the switch, which resets it.
					if cur, err := readNr(r.FS, name); err != nil || cur != rep.WinnerNr {
						if err := setNr(r.FS, name, rep.WinnerNr); err != nil {
							return rep, err
						}
						rep.Applied = rep.Winner
					}
				}
				return rep, nil
			}
		}
	}
	if n := procsFor(o); n > 0 && r.Procs != nil {
		defer r.Procs(n)()
	}
	rep, err := Run(ctx, Target{FS: r.FS, DevDir: r.DevDir, StateDir: r.StateDir, Locks: r.Locks, Name: disk, InFlight: r.InFlight}, o, r.Progress)
	if err != nil {
		return rep, err
	}
	if err := r.Store.Remember(RecordOf(rep, r.now())); err != nil {
		return rep, fmt.Errorf("%s: remembering the result in %s: %w", name, r.Store.Path(), err)
	}
	return rep, nil
}

// lookupFlat finds a result of want's method measured on a disk whose IOPS
// stopped growing at some depth, past which the probe dropped the depths
// asked for (Report.FlatAt): it is recorded with the depths it measured,
// and serves a lookup of the depths asked.
func (r *Runner) lookupFlat(key Key, want Want) (*Record, error) {
	for _, flat := range measuredDepths(want.Depths, want.Depth) {
		w := want
		w.Depths = nil
		for _, d := range want.Depths {
			if d <= flat {
				w.Depths = append(w.Depths, d)
			}
		}
		if len(w.Depths) == 0 {
			w.Depths = want.Depths[:1]
		}
		w.Depth = min(want.Depth, flat)
		if slices.Equal(w.Depths, want.Depths) && w.Depth == want.Depth {
			continue // nothing dropped: the lookup already made
		}
		rec, err := r.Store.Lookup(key, w, r.now())
		if err != nil || (rec != nil && rec.FlatAt == flat) {
			return rec, err
		}
	}
	return nil, nil
}

// report is a remembered record as a report: the figures and decision,
// nothing measured now.
func (rec *Record) report() *Report {
	rep := &Report{
		Device: rec.Device, Engine: rec.Engine, Depth: rec.Depth, Depths: rec.Depths, FlatAt: rec.FlatAt, BlockSize: rec.BlockSize, DurationS: rec.DurationS,
		Rounds: rec.Rounds, Choose: rec.Choose, Margin: rec.Margin, Incumbent: rec.Incumbent, NrRequests: rec.NrRequests,
		Candidates: rec.Figures, Decision: rec.Decision, RememberedAs: rec.Key.String(), Key: rec.Key, Serial: rec.Serial,
		From: "remembered " + rec.At.Format(time.RFC3339), MeasuredAt: rec.At,
	}
	if rec.Seeded != "" {
		rep.From = "seeded from " + rec.Seeded
	}
	return rep
}
