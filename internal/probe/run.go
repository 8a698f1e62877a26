package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
)

// Target is the disk to probe, by its name (checked where it entered), and
// the trees it is seen through.
type Target struct {
	FS     sysfs.FS
	DevDir string // default paths.Default.Dev
	// StateDir holds the originals records and probes.json.
	StateDir string
	// Locks is the machine's lock of disks (disklock.New("") when nil): the
	// probe holds its disk's for its whole run.
	Locks *disklock.Locks
	Name  sysfs.Name
	// InFlight, when set, records the probe's writes to the disk while
	// they run: one the probe stops waiting for (the disk does not
	// answer) stays listed until the kernel returns it.
	InFlight *tasks.Writes
	// engine, when set, is the engine read with (tests wrap one to
	// watch each measurement); else Options.Engine's.
	engine Engine
}

// Report is what a probe found and did; its JSON is `iosched probe --json`.
type Report struct {
	Device string `json:"device"`
	Engine string `json:"engine"`
	Depth  int    `json:"depth"`
	// Depths are the curve's depths as measured: Options.Depths capped
	// at the disk's queue depth (CapDepths).
	Depths []int `json:"depths,omitempty"`
	// FlatAt is the depth at which the disk's IOPS stopped growing
	// when the probe sized it, past which the depths asked for were
	// dropped (Depths and Depth are then no deeper); 0 when none was.
	FlatAt    int     `json:"flat_at,omitempty"`
	BlockSize int     `json:"block_size"`
	DurationS float64 `json:"duration_s"`
	Rounds    int     `json:"rounds"`
	Choose    string  `json:"choose"`
	Margin    float64 `json:"margin"`
	// Original is the scheduler the disk had; Incumbent the candidate a
	// challenger must beat (Original when it is a candidate), by
	// Candidate.Name.
	Original  string `json:"original"`
	Incumbent string `json:"incumbent"`
	// NrRequests are the nr_requests each scheduler was measured with
	// (Options.NrRequests), none without that dimension; OriginalNr is
	// the disk's nr_requests before the probe.
	NrRequests []int `json:"nr_requests,omitempty"`
	OriginalNr int   `json:"original_nr_requests,omitempty"`
	// Restored: every setting the probe changed is back as it was.
	Restored bool `json:"restored"`
	// Disturbed says how others used the disk around the measurements
	// (only with Options.Force, which probes a busy disk): their I/O
	// before the first switch, or their writes during the probe, which
	// reads alone never make. Its figures are others' load's as much as
	// the schedulers': the result is remembered marked, and not reused.
	Disturbed string `json:"disturbed,omitempty"`
	// Noise is the largest Candidate.Spread: differences below it (or
	// below the margin) are reported as no difference.
	Noise float64 `json:"noise"`
	// Applied is the scheduler left on the disk with Options.Apply.
	Applied string `json:"applied,omitempty"`

	NoWait       *bool  `json:"nowait"`
	NoWaitReason string `json:"nowait_reason,omitempty"`
	// Punted (io_uring only): whether io_uring worker threads ran during
	// the measurements, i.e. reads were handed out of line; nil where it
	// cannot be seen (psync, no schedstat).
	Punted     *bool `json:"punted"`
	WorkerRuns int64 `json:"io_worker_runs,omitempty"`

	ReadsBefore  uint64 `json:"reads_before"`
	ReadsAfter   uint64 `json:"reads_after"`
	WritesBefore uint64 `json:"writes_before"`
	WritesAfter  uint64 `json:"writes_after"`

	Candidates []Candidate `json:"candidates"`
	Decision
	RememberedAs string `json:"remembered_as"`
	// From says where a remembered decision came from: "" for a probe
	// just run, "remembered" (probes.json) or "seeded: FILE".
	From string `json:"from,omitempty"`
	// MeasuredAt is when a remembered or seeded result was measured;
	// zero for a probe just run (measured now).
	MeasuredAt time.Time `json:"measured_at,omitzero"`

	BudgetS  float64 `json:"budget_s"`
	ElapsedS float64 `json:"elapsed_s"`

	// Key is what the result is remembered under; Serial is recorded, not
	// part of it.
	Key    Key    `json:"key"`
	Serial string `json:"serial,omitempty"`

	// restoreDone: see RestoreDone.
	restoreDone chan struct{}
}

// RestoreDone is nil unless the probe ended with its restore still waiting
// for the disk (ErrRestorePending); it is then closed once the restore has
// ended and the disk's lock is free.
func (r *Report) RestoreDone() <-chan struct{} {
	if r == nil || r.restoreDone == nil {
		return nil
	}
	return r.restoreDone
}

// ErrInterrupted is a probe stopped by its context (SIGINT, SIGTERM, a
// reload) before it finished; its settings were restored.
var ErrInterrupted = errors.New("probe interrupted")

// ErrDiskGone is a disk removed (or replaced) during its probe.
var ErrDiskGone = errors.New("the disk went away during the probe")

// ErrSchedulerChanged is a probe that found its disk's scheduler set by
// someone else (an admin's echo bfq > queue/scheduler, a udev rule):
// figures measured then would be another scheduler's under a candidate's
// name, and putting the original back would undo that change. The probe
// ends without a result and writes nothing more: the disk keeps the other
// writer's scheduler (and what its switch reset), and the originals record
// is dropped, as it no longer describes what should come back.
var ErrSchedulerChanged = errors.New("someone else changed the disk's scheduler during the probe")

// ErrRestorePending is a probe that ended before the disk took back its
// original settings: see restoreSlack. Report.RestoreDone tells when it has.
var ErrRestorePending = errors.New("the original settings are not back yet")

// How long a probe waits for the disk to take back its settings. A
// scheduler switch freezes the queue and waits for every request in
// flight; on a disk that stopped answering that is until it answers again.
// The restore is waited for until restoreSlack past the budget, or only
// restoreWaitStuck when the disk was already found not answering
// (ErrStuck: the engine gave up on its reads, when none came back for a
// grace that scales with the disk's read time and the depth, or
// drainOverrun past the budget at the latest, or the probe on a switch,
// after switchWait); as the measurement stops restoreAllowance
// before the budget, either way the run ends within a second of its
// budget. The probe then ends without
// waiting further, and the write goes on: the disk stays locked until it
// ends, so nothing else switches the queue meanwhile, and the originals
// stay recorded for the next probe or daemon start, should the process end
// first.
const (
	restoreSlack     = 900 * time.Millisecond
	restoreWaitStuck = 400 * time.Millisecond
	// drainOverrun: reads still in flight this long past the budget
	// are given up on (then restoreWaitStuck more is waited for the
	// restore: within restoreSlack).
	drainOverrun = restoreSlack - restoreWaitStuck
)

// minBlocks is how many distinct blocks a disk must have for random reads
// over it to mean anything (fewer would measure a cache).
const minBlocks = 256

// Run probes one disk: it checks the disk can be probed safely (Refusal
// otherwise), records the settings a switch resets in the state directory,
// measures each candidate in alternating order over the rounds, decides,
// and restores the originals (or, with Options.Apply, leaves the winner).
// The originals are restored on every way out: an error, ctx ending, the
// budget running out. progress, when not nil, is told each step; the first
// line says the disk is being sized, and the line that starts "probing"
// gives the time budget, before the first switch.
func Run(ctx context.Context, t Target, o Options, progress func(string)) (rep *Report, err error) {
	say := func(format string, a ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, a...))
		}
	}
	o.fill()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if t.DevDir == "" {
		t.DevDir = paths.Default.Dev
	}
	name := t.Name.String()
	if t.Name.IsZero() {
		return nil, fmt.Errorf("%w: empty", sysfs.ErrInvalidName)
	}
	dev, err := t.FS.Device(name)
	switch {
	case errors.Is(err, sysfs.ErrNoDevice):
		return nil, refuse(name, "no such disk in %s", t.FS.Root())
	case err != nil:
		return nil, err
	}
	if dev.BioBased() {
		return nil, refuse(name, "%s is bio-based (driver %s): it has no scheduler to choose", name, orUnknown(dev.Driver))
	}
	if dev.Scheduler == nil {
		return nil, refuse(name, "its scheduler cannot be read: %s", strings.Join(dev.Errors, "; "))
	}
	var cands []string
	for _, c := range o.Candidates {
		if slices.Contains(dev.Schedulers, c) {
			cands = append(cands, c)
		}
	}
	if len(pairsOf(cands, o.NrRequests)) < 2 {
		return nil, refuse(name, "it offers %d of the candidates %s (it offers %s): nothing to compare", len(cands), strings.Join(o.Candidates, ", "), strings.Join(dev.Schedulers, ", "))
	}
	if dev.SizeBytes == nil || *dev.SizeBytes < uint64(minBlocks*o.BlockSize) {
		size := "unknown"
		if dev.SizeBytes != nil {
			size = fmt.Sprintf("%d bytes", *dev.SizeBytes)
		}
		return nil, refuse(name, "the disk is too small: %s, and random reads of %d bytes need at least %d", size, o.BlockSize, minBlocks*o.BlockSize)
	}
	if lbs := dev.LogicalBlockSize; lbs != nil && uint64(o.BlockSize)%*lbs != 0 {
		return nil, refuse(name, "block size %d is not a multiple of the disk's logical block size %d", o.BlockSize, *lbs)
	}
	eng := t.engine
	if eng == nil {
		if eng, err = NewEngine(o.Engine); err != nil {
			return nil, err
		}
	}

	if t.Locks == nil {
		t.Locks = disklock.New("")
		defer t.Locks.Close() // once the disk's lock is let go
	}
	unlock, err := lockDisk(t.Locks, t.StateDir, name)
	if err != nil {
		return nil, err
	}
	lockHandedOff := false // to a restore still waiting for the disk
	defer func() {
		if !lockHandedOff {
			unlock()
		}
	}()
	if _, err := os.Stat(originalsPath(t.StateDir, name)); err == nil {
		// An earlier probe of this disk was killed: put its originals back
		// first, or they would be recorded as the probe's changes.
		switch r := recoverOne(t.StateDir, t.FS, name); {
		case r.Err != nil:
			return nil, fmt.Errorf("%s: restoring an interrupted probe's settings: %w", name, r.Err)
		case r.Restored:
			say("restored the settings an interrupted probe of %s left", name)
		case r.Note != "":
			say("an interrupted probe's record of %s: %s", name, r.Note)
		}
		if dev, err = t.FS.Device(name); err != nil {
			return nil, err
		}
	}
	fd, err := openNode(t.DevDir, name, dev.MajorMinor)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)

	rep = &Report{
		Device: name, Engine: eng.Name(), Depth: o.Depth, BlockSize: o.BlockSize, DurationS: o.Duration.Seconds(),
		Rounds: o.Rounds, Choose: o.Choose, Margin: o.Margin, Original: *dev.Scheduler,
		Key: KeyOf(t.FS, dev), Serial: dev.Serial,
	}
	rep.RememberedAs = rep.Key.String()
	asked := o.Depths
	o.Depths = CapDepths(o.Depths, rep.Key.QueueDepth)
	rep.Depths = o.Depths
	nr := nrState{on: len(o.NrRequests) > 0, defaults: map[string]int{}, tags: rep.Key.QueueDepth}
	if nr.on {
		rep.NrRequests = slices.Clone(o.NrRequests)
		v, err := readNr(t.FS, name)
		if err != nil {
			return nil, refuse(name, "its nr_requests cannot be read, and the probe would have to put it back: %v", err)
		}
		rep.OriginalNr = v
	}
	pairs := pairsOf(cands, o.NrRequests)
	var onDisk bool
	rep.Incumbent, onDisk = incumbentOf(cands, o.NrRequests, *dev.Scheduler, rep.OriginalNr, rep.Key.QueueDepth)
	if nr.on && len(cands) > 1 && pairs[0].sched == *dev.Scheduler {
		// The first switch is to another scheduler, so that each
		// scheduler's default nr_requests is read after a switch to
		// it (switching to the scheduler a disk runs changes nothing).
		pairs = append(pairs[len(o.NrRequests):], pairs[:len(o.NrRequests)]...)
	}
	rep.NoWait, rep.NoWaitReason = devnode.NoWait(t.DevDir, name, dev.MajorMinor)

	start := time.Now()
	// Until the disk is sized, the bound is sizing's: a disk that does
	// not answer is found then, before anything is switched.
	rep.BudgetS = sizingBound.Seconds()
	if err := checkAddressSpace(eng.Name(), slices.Max(measuredDepths(o.Depths, o.Depth))); err != nil {
		return nil, refuse(name, "%v", err)
	}
	say("sizing %s: %d reads at depth 1 give its read time, from which the probe's bound follows (the disk answers within %s or counts as not answering)",
		name, latencyReads, sizingBound.Round(100*time.Millisecond))
	// Watched under --force too: a busy disk is then probed, but its
	// result marked.
	busy := checkIdle(t.FS, name, busySample)
	var ref *Refusal
	switch {
	case busy == nil:
	case o.Force && errors.As(busy, &ref) && ref.Busy:
		rep.Disturbed = ref.Reason
		say("%s: probing a busy disk (--force): %s; the result is remembered as disturbed, and not reused", name, ref.Reason)
	default:
		return nil, busy
	}
	gone := func() bool { return !t.FS.Exists(name) || t.FS.DiskSeq(name) != dev.DiskSeq }
	pool := 0
	if nr.on {
		pool = rep.OriginalNr
	}
	sh, err := sizeDisk(ctx, eng, fd, int64(*dev.SizeBytes), o, pool, say, func(more time.Duration) {
		rep.BudgetS = (time.Since(start) + more).Seconds()
	})
	if err != nil {
		// Nothing was switched yet: nothing to put back.
		rep.Restored = true
		rep.ElapsedS = time.Since(start).Seconds()
		switch {
		case gone():
			return rep, fmt.Errorf("%s: %w (%v)", name, ErrDiskGone, err)
		case ctx.Err() != nil:
			return rep, fmt.Errorf("%s: %w: %w", name, ErrInterrupted, context.Cause(ctx))
		}
		return rep, fmt.Errorf("%s: %w", name, err)
	}
	o.Depths, o.Depth = sh.depths, sh.deep
	rep.Depths, rep.Depth = o.Depths, o.Depth
	if len(sh.dropped) > 0 {
		rep.FlatAt = sh.flatAt
	}
	budget := budgetFor(o, sh, len(pairs), time.Since(start))
	rep.BudgetS = budget.Seconds()
	capped := ""
	if !slices.Equal(asked, CapDepths(asked, rep.Key.QueueDepth)) {
		capped = fmt.Sprintf(", capped at the disk's %d hardware tags", rep.Key.QueueDepth)
	}
	if len(sh.dropped) > 0 {
		capped += fmt.Sprintf(", past depth %d dropped: flat", sh.flatAt)
	}
	names := make([]string, len(pairs))
	for i, p := range pairs {
		names[i] = pairName(p.sched, p.nr, nr.on)
	}
	say("probing %s: %s, %d rounds x %d candidates (%s), %s per measurement at depths %s (curve %s%s; decision at 1 and %d), %d-byte reads; %s: at most %s",
		name, eng.Name(), o.Rounds, len(pairs), strings.Join(names, ", "), o.Duration, joinInts(measuredDepths(o.Depths, o.Depth)),
		joinInts(o.Depths), capped, o.Depth, o.BlockSize, sh.describe(), budget.Round(100*time.Millisecond))

	// Everything that can fail before the restore below is armed comes
	// before the record is saved: a record left with no restore armed
	// would be "restored" later over whatever was set since.
	before, err := readStat(t.FS, name)
	if err != nil {
		return nil, err
	}
	rec, err := newRecord(t.FS, t.StateDir, name)
	if err != nil {
		return nil, err
	}
	orig := rec.disk()
	if err := rec.save(); err != nil {
		return nil, fmt.Errorf("%s: recording the original settings before the first switch: %w", name, err)
	}
	rep.ReadsBefore, rep.WritesBefore = before.ReadIOs, before.WriteIOs

	// Measuring stops in time for the restore to fit in the budget.
	mctx, cancel := context.WithDeadline(ctx, start.Add(budget-restoreAllowance))
	defer cancel()
	apply, applyNr := "", 0
	writes := writeChain{inFlight: t.InFlight, disk: name, original: orig.Values["scheduler"]}
	defer func() {
		// Every way out puts the originals back, unless the winner is to
		// stay; a disk that went away has nothing to put back.
		if gone() {
			os.Remove(originalsPath(t.StateDir, name))
			if err == nil {
				err = fmt.Errorf("%s: %w", name, ErrDiskGone)
			}
			return
		}
		keep := apply != "" && (apply != orig.Values["scheduler"] || applyNr > 0 && strconv.Itoa(applyNr) != orig.Values["nr_requests"])
		what := "restore"
		if keep {
			what = "scheduler " + apply
		}
		done := writes.start(what, func() error { // after a switch still waiting, if any
			// The disk must still show what the probe's last
			// switch left: another's change since stays.
			if err := writes.stillOurs(t.FS, name, "before the restore"); err != nil {
				return err
			}
			if nr.shrunk && !(keep && apply == "none") {
				// The hardware tags in use are the last none
				// pool's, whatever nr_requests shows after.
				if err := rec.growTags(t.FS, nr.tags); err != nil {
					return err
				}
			}
			if keep {
				if err := setScheduler(t.FS, name, apply); err != nil || applyNr == 0 {
					return err
				}
				if apply == "none" {
					_, err := forceNr(t.FS, name, applyNr, func(n int) (int, error) { return n, setNr(t.FS, name, n) })
					return err
				}
				return setNr(t.FS, name, applyNr)
			}
			return orig.Restore(t.FS, name)
		})
		wait := time.Until(start.Add(budget + restoreSlack))
		if errors.Is(err, ErrStuck) {
			wait = min(wait, restoreWaitStuck)
		}
		wait = max(wait, 10*time.Millisecond) // a run past its budget still looks once
		var rerr error
		select {
		case <-done.Done():
			rerr = done.Err()
		case <-time.After(wait):
			lockHandedOff = true
			rep.restoreDone = make(chan struct{})
			go func() {
				if e := done.Err(); e == nil || errors.Is(e, ErrSchedulerChanged) {
					os.Remove(originalsPath(t.StateDir, name))
				}
				unlock()
				close(rep.restoreDone)
			}()
			if after, e := readStat(t.FS, name); e == nil { // the counters, not the queue
				rep.ReadsAfter, rep.WritesAfter = after.ReadIOs, after.WriteIOs
			}
			rep.ElapsedS = time.Since(start).Seconds()
			err = errors.Join(err, fmt.Errorf("%s: %w: the disk has not taken the write after %s (a switch waits for the reads in flight); the write goes on and the disk stays locked until it ends; the settings stay recorded in %s for the next probe or daemon start",
				name, ErrRestorePending, wait.Round(time.Millisecond), originalsPath(t.StateDir, name)))
			return
		}
		if rerr == nil {
			rep.Applied, rep.Restored = apply, !keep
		}
		if errors.Is(rerr, ErrSchedulerChanged) {
			// Nothing was written: the record no longer says what
			// should come back.
			os.Remove(originalsPath(t.StateDir, name))
			if !errors.Is(err, ErrSchedulerChanged) { // else said already
				err = errors.Join(err, rerr)
			}
			// Changed after the last measurement: its figures were
			// the candidates', but the probe still ends without a
			// result, as one found mid-measurement does.
			rep.Decision, rep.Applied = Decision{}, ""
			rep.ElapsedS = time.Since(start).Seconds()
			return
		}
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: restoring the original settings (they stay recorded in %s for the next probe or daemon start): %w",
				name, originalsPath(t.StateDir, name), rerr))
			return
		}
		if e := os.Remove(originalsPath(t.StateDir, name)); e != nil {
			err = errors.Join(err, e)
		}
		if after, e := readStat(t.FS, name); e == nil {
			rep.ReadsAfter, rep.WritesAfter = after.ReadIOs, after.WriteIOs
			if rep.WritesAfter != rep.WritesBefore && rep.Disturbed == "" {
				// The probe only reads: these were others'.
				rep.Disturbed = fmt.Sprintf("%d writes by others during the probe", rep.WritesAfter-rep.WritesBefore)
			}
		}
		rep.ElapsedS = time.Since(start).Seconds()
	}()

	rep.Candidates = make([]Candidate, len(pairs))
	for i, p := range pairs {
		rep.Candidates[i].Scheduler, rep.Candidates[i].NrRequests = p.sched, p.nr
	}
	var workerRuns int64
	workerSeen := EngineSeesPunting(eng.Name())
	for round := 1; round <= o.Rounds; round++ {
		order := make([]int, len(pairs))
		for i := range order {
			order[i] = i
		}
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for pos, ci := range order {
			c := names[ci]
			rf, set, wr, err := measureCandidate(mctx, &writes, rec, t.FS, name, eng, fd, int64(*dev.SizeBytes), pairs[ci], &nr, round, o, &sh)
			if err != nil {
				if gone() {
					return rep, fmt.Errorf("%s: %w (%v)", name, ErrDiskGone, err)
				}
				if errors.Is(err, ErrSchedulerChanged) {
					return rep, err
				}
				if ctx.Err() != nil {
					return rep, fmt.Errorf("%s: %w: %w", name, ErrInterrupted, context.Cause(ctx))
				}
				if mctx.Err() != nil {
					// The budget counts each measurement's drain at
					// the read time measured at the start: a disk
					// that got slower since runs out of it.
					still := ""
					if errors.Is(err, ErrStuck) {
						still = fmt.Sprintf(" (%s, round %d: %v)", c, round, err)
					}
					return rep, fmt.Errorf("%s: the probe ran out of its %s budget%s: the disk answered slower than when it was sized (%s a read at depth 1): another user, or a rate that changed; probe it again, or ask for less: --rounds %d (rounds in [rule.probe]) or --duration %s (duration)",
						name, budget.Round(100*time.Millisecond), still, sh.lat.Round(time.Microsecond), max(o.Rounds-1, 1), max(o.Duration/2, probeopt.MinDuration))
				}
				return rep, fmt.Errorf("%s: %s, round %d: %w", name, c, round, err)
			}
			if wr < 0 {
				workerSeen = false
			}
			workerRuns += max(wr, 0)
			rf.Round, rf.Position = round, pos+1
			rep.Candidates[ci].Rounds = append(rep.Candidates[ci].Rounds, rf)
			rep.Candidates[ci].NrRequestsSet = set
			say("round %d/%d %-12s depth %d: %s IOPS %.1f MiB/s p99 %s; depth 1: %s IOPS p50 %s p99 %s; curve %s",
				round, o.Rounds, c, o.Depth, kilo(rf.IOPS), rf.MiBs, us(rf.P99us), kilo(rf.QD1IOPS), us(rf.QD1P50), us(rf.QD1P99), CurveText(rf.Curve))
		}
	}
	if workerSeen {
		p := workerRuns > 0
		rep.Punted, rep.WorkerRuns = &p, workerRuns
	}
	for i := range rep.Candidates {
		rep.Candidates[i].medians()
	}
	rep.Noise = setSpreads(o.Choose, rep.Candidates)
	rep.Decision = withinNoise(DecideFor(o.Choose, o.Margin, rep.Incumbent, onDisk, rep.Candidates),
		o.Choose, o.Margin, rep.Noise, rep.Incumbent, onDisk, rep.Candidates)
	if why := disturbance(rep.Candidates); why != "" {
		// Figures of a rate that moved are the rate's, not the
		// schedulers': no decision is made from them.
		if rep.Disturbed == "" {
			rep.Disturbed = why
		}
		rep.Decision = Decision{Winner: rep.Incumbent, Reason: "no decision: " + why + "; the current scheduler stays",
			Provenance: "probe: disturbed, " + rep.Incumbent + " kept", Undecided: true}
		return rep, nil // nothing applied: the original is restored
	}
	if o.Apply {
		apply, applyNr = rep.Winner, rep.WinnerNr
	}
	return rep, nil
}

// pair is one candidate of a probe: a scheduler, with an nr_requests
// when that dimension is measured.
type pair struct {
	sched string
	nr    int
}

// pairsOf are the candidates: each scheduler with each of nrs, or alone
// when nrs is empty, scheduler by scheduler.
func pairsOf(scheds []string, nrs []int) []pair {
	var out []pair
	for _, s := range scheds {
		if len(nrs) == 0 {
			out = append(out, pair{sched: s})
		}
		for _, n := range nrs {
			out = append(out, pair{sched: s, nr: n})
		}
	}
	return out
}

// incumbentOf names the candidate a challenger must beat on a disk that
// runs sched with nr_requests nr and tags hardware tags: the disk's own
// settings when they are a candidate (onDisk), else the first candidate
// of sched (or of the first scheduler when sched is none of them). A
// disk's nr_requests is the "default" candidate when it is the kernel's
// value for sched (defaultNr).
func incumbentOf(scheds []string, nrs []int, sched string, nr, tags int) (name string, onDisk bool) {
	s := scheds[0]
	if slices.Contains(scheds, sched) {
		s, onDisk = sched, true
	}
	if len(nrs) == 0 {
		return s, onDisk
	}
	at := -1
	for i, n := range nrs {
		if n == nr || n == probeopt.NrRequestsDefault && nr == defaultNr(sched, tags) && nr > 0 {
			at = i
		}
	}
	if at < 0 || !onDisk {
		return pairName(s, nrs[0], true), false
	}
	return pairName(s, nrs[at], true), true
}

// defaultNr is the nr_requests the kernel gives sched on a disk of tags
// hardware tags when the switch to it is made: the tags for none
// (elevator_disable in block/elevator.c), else twice the tags up to
// BLKDEV_DEFAULT_RQ, 128 (blk_mq_init_sched in block/blk-mq-sched.c); 0
// when tags is not known. The probe reads the value back after a switch;
// this is for a scheduler it did not switch to, the one the disk runs.
func defaultNr(sched string, tags int) int {
	switch {
	case tags <= 0:
		return 0
	case sched == "none":
		return tags
	}
	return 2 * min(tags, 128)
}

// nrState is what a probe measuring nr_requests knows: whether it does,
// each scheduler's default as read back after a switch to it, and the
// disk's hardware tags. Only the write chain's goroutines use defaults,
// one after the other.
type nrState struct {
	on       bool
	defaults map[string]int
	tags     int
	// shrunk: the probe's last write of none's pool was below the
	// tags, which shrinks the hardware tags in use, for every scheduler,
	// until a write under none grows them back: a switch resets the
	// nr_requests shown, not them (elevator_disable in block/elevator.c
	// sets it to the tag set's depth and resizes nothing).
	shrunk bool
}

// forceNr makes n the pool of a disk running none, with set, which writes
// and returns the value read back. Under none nr_requests is the depth of
// the hardware tags in use (blk_mq_update_nr_requests resizes them), and
// a switch to none shows the full tags as nr_requests without resizing
// them back, while a write of the value shown changes nothing (the kernel
// returns early): so when the disk shows n already, another value is
// written first, and the tags in use are n whatever came before.
func forceNr(fs sysfs.FS, name string, n int, set func(int) (int, error)) (int, error) {
	cur, err := readNr(fs, name)
	if err != nil {
		return 0, err
	}
	if cur == n {
		other := n - 1
		if other < probeopt.MinNrRequests {
			other = n + 1
		}
		if _, err := set(other); err != nil {
			return 0, err
		}
	}
	return set(n)
}

// readNr reads the disk's nr_requests.
func readNr(fs sysfs.FS, name string) (int, error) {
	v, err := fs.ReadQueueAttr(name, "nr_requests")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s: nr_requests %q is not a number", name, v)
	}
	return n, nil
}

// setNr writes the disk's nr_requests and returns nil when the kernel
// took n (see record.setNr for a value it holds to another).
func setNr(fs sysfs.FS, name string, n int) error {
	got, _, err := fs.WriteReadQueueAttr(name, "nr_requests", strconv.Itoa(n))
	if err != nil {
		return err
	}
	if got != strconv.Itoa(n) {
		return fmt.Errorf("%s: nr_requests %d written, the kernel kept %s", name, n, got)
	}
	return nil
}

// writeChain makes a probe's writes to its disk's settings one after the
// other, each in a goroutine of its own that first waits for the one
// before: a write the disk holds up (a switch waits for the I/O in flight,
// which a disk that stopped answering never ends) holds up the writes
// after it, never the probe, and no two switches of the queue ever run at
// once. Only the probe's goroutine starts writes. Each goroutine goes
// through inFlight, which lists it by disk until it returns.
type writeChain struct {
	inFlight *tasks.Writes
	disk     string
	last     <-chan struct{} // closed when the last write started has ended
	// left is the scheduler the probe's last switch set, "" before the
	// first: only the chain's writes, one after the other, use it.
	left string
	// original is the disk's scheduler before the probe.
	original string
}

// stillOurs checks, from a write of the chain, that the disk shows the
// scheduler the probe left on it (its original before the first switch),
// so that no switch or restore of the probe undoes another's; when says
// at which step. A scheduler that cannot be read is left to the write
// after, which fails in turn.
func (c *writeChain) stillOurs(fs sysfs.FS, name, when string) error {
	want := c.left
	if want == "" {
		want = c.original
	}
	return schedulerStill(fs, name, want, when)
}

// schedulerStill is ErrSchedulerChanged when the disk's scheduler is no
// longer want.
func schedulerStill(fs sysfs.FS, name, want, when string) error {
	cur, err := fs.ReadQueueAttr(name, "scheduler")
	if err != nil || cur == want {
		return nil
	}
	return fmt.Errorf("%s: %w: it is %s %s, where the probe had left %s; the probe ends without a result and leaves %s and the disk's other settings as they are now (nothing is put back over another's change)",
		name, ErrSchedulerChanged, cur, when, want, cur)
}

// start queues w, the write what, after the writes started before it.
func (c *writeChain) start(what string, w func() error) *tasks.Started {
	prev := c.last
	s := c.inFlight.Go(c.disk, what, func() error {
		if prev != nil {
			<-prev
		}
		return w()
	})
	c.last = s.Done()
	return s
}

// switchWait bounds how long a probe waits for a switch to a candidate.
// Measuring stops restoreAllowance before the budget, and a restore is
// waited for restoreWaitStuck after a switch given up on: so the run ends
// within a second of its budget.
const switchWait = 500 * time.Millisecond

// measureCandidate switches to sched, warms up, and measures at each of
// measuredDepths, ascending: the curve's points, depth 1 and o.Depth.
// Each measurement's observed depth is the disk's own count of requests in
// flight over it, from its stat read just before and after. The reads of
// one round at one depth go to the same blocks for every candidate (the
// seed is the round's and the depth's).
func measureCandidate(ctx context.Context, writes *writeChain, rec *record, fs sysfs.FS, name string, eng Engine, fd int, size int64, p pair, nr *nrState, round int, o Options, sh *shape) (RoundFigures, int, int64, error) {
	var rf RoundFigures
	sched := p.sched
	set := 0 // the nr_requests the disk took, read back
	switched := writes.start("scheduler "+sched, func() error {
		if err := writes.stillOurs(fs, name, "before the switch to "+sched); err != nil {
			return err
		}
		from := writes.left
		if from == "" {
			from = writes.original
		}
		if nr.shrunk && sched != "none" {
			// A scheduler's requests each need a hardware tag too.
			if err := rec.growTags(fs, nr.tags); err != nil {
				return err
			}
			nr.shrunk = false
		}
		if err := rec.switchTo(fs, sched); err != nil {
			return err
		}
		writes.left = sched
		if !nr.on {
			return nil
		}
		// The switch reset nr_requests to the scheduler's default
		// (unless it was to the scheduler the disk ran): the value for
		// "default" is what the disk shows right after it.
		if from != sched {
			v, err := readNr(fs, name)
			if err != nil {
				return err
			}
			nr.defaults[sched] = v
		}
		want := p.nr
		if want == probeopt.NrRequestsDefault {
			d, ok := nr.defaults[sched]
			if !ok {
				d = defaultNr(sched, nr.tags)
			}
			want = d
		}
		if sched != "none" {
			got, err := rec.setNr(fs, want)
			set = got
			return err
		}
		if nr.tags > 0 {
			// Without a scheduler the pool is the hardware's tags:
			// the kernel refuses more (blk_mq_tag_update_depth in
			// block/blk-mq-tag.c), so more is asked as the tags and
			// reported as the value set.
			want = min(want, nr.tags)
			nr.shrunk = want < nr.tags
		}
		got, err := forceNr(fs, name, want, func(n int) (int, error) { return rec.setNr(fs, n) })
		set = got
		return err
	})
	select {
	case <-switched.Done():
		if err := switched.Err(); err != nil {
			return rf, 0, 0, err
		}
	case <-time.After(switchWait):
		return rf, 0, 0, fmt.Errorf("switching to %s: the disk has not taken it after %s (a switch waits for the I/O in flight): %w", pairName(sched, p.nr, nr.on), switchWait, ErrStuck)
	}
	runs := int64(0)
	job := func(depth int, d time.Duration, seed uint64) (*Sample, float64, error) {
		deadline := time.Now().Add(d)
		var giveUp time.Time
		if dl, ok := ctx.Deadline(); ok {
			if dl.Before(deadline) {
				deadline = dl
			}
			// Reads still draining past the budget are given up on
			// then (see drainOverrun), never sooner than hangGrace
			// after the measurement.
			giveUp = dl.Add(restoreAllowance + drainOverrun)
			if giveUp.Before(deadline.Add(hangGrace)) {
				giveUp = deadline.Add(hangGrace)
			}
		}
		before, err := readStat(fs, name)
		if err != nil {
			return nil, 0, err
		}
		s, err := eng.Run(ctx, &Job{FD: fd, BlockSize: o.BlockSize, Depth: depth, Deadline: deadline, Size: size, Seed: seed, Grace: sh.graceOf(depth), GiveUp: giveUp})
		var observed float64
		if after, serr := readStat(fs, name); serr == nil && s != nil {
			observed = observedDepth(before.Stat, after.Stat, s.Elapsed)
		} else if err == nil {
			err = serr
		}
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if s != nil && s.WorkerRuns >= 0 && runs >= 0 {
			runs += s.WorkerRuns
		} else {
			runs = -1
		}
		if err == nil {
			// Figures count as sched's only if the disk ran it from
			// the switch to the end of the measurement (each check
			// after one is the check before the next).
			err = schedulerStill(fs, name, sched, fmt.Sprintf("after a measurement of %s (round %d)", sched, round))
		}
		return s, observed, err
	}
	if _, _, err := job(o.Depth, o.warmup(), uint64(round)<<16|3); err != nil {
		return rf, set, runs, err
	}
	for _, depth := range measuredDepths(o.Depths, o.Depth) {
		s, observed, err := job(depth, o.Duration, uint64(round)<<16|uint64(depth)<<2|1)
		if err != nil {
			return rf, set, runs, err
		}
		m := summarize(s, o.BlockSize)
		if depth == 1 {
			rf.QD1IOPS, rf.QD1P50, rf.QD1P99, rf.QD1P999 = m.iops, m.p50, m.p99, m.p999
		}
		if depth == o.Depth {
			rf.IOPS, rf.MiBs, rf.P50us, rf.P99us, rf.P999us, rf.CPUPerIOus = m.iops, m.mibs, m.p50, m.p99, m.p999, m.cpuPerIO
		}
		if slices.Contains(o.Depths, depth) {
			rf.Curve = append(rf.Curve, CurvePoint{Depth: depth, ObservedDepth: observed, IOPS: m.iops, P50us: m.p50, P99us: m.p99, IOWorkerRuns: HandoffsOf(s.WorkerRuns)})
		}
	}
	return rf, set, runs, nil
}

// CurveText is a curve in one line: each point's depth, IOPS and, in
// brackets, the disk's observed depth ("1: 45.1K (0.62)  4: 121K (1.81)"),
// and io_uring's hand-offs to io-wq where there were any
// ("32: 35.5K (9.80, io-wq 2651)").
func CurveText(pts []CurvePoint) string {
	parts := make([]string, len(pts))
	for i, p := range pts {
		wq := ""
		if p.IOWorkerRuns.N > 0 {
			wq = fmt.Sprintf(", io-wq %d", p.IOWorkerRuns.N)
		}
		parts[i] = fmt.Sprintf("%d: %s (%.2f%s)", p.Depth, kilo(p.IOPS), p.ObservedDepth, wq)
	}
	return strings.Join(parts, "  ")
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// setScheduler switches the disk's scheduler and checks the kernel took it.
func setScheduler(fs sysfs.FS, name, sched string) error {
	got, _, err := fs.WriteReadQueueAttr(name, "scheduler", sched)
	if err != nil {
		return err
	}
	if got != sched {
		return fmt.Errorf("%s: scheduler %s written, the kernel kept %s", name, sched, got)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
