package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"weak"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// Pipeline holds what every step needs. The zero Evaluate is the policy's
// own; a Pipeline is safe for concurrent use by many disks' goroutines.
type Pipeline struct {
	FS sysfs.FS
	// Nodes tests NOWAIT on a disk's node (devnode.Nodes, which a
	// command may wrap to add advice to a test it refuses). Required
	// when a Scope asks for NOWAIT.
	Nodes NoWaitTester
	// StateDir holds the remembered probe results (probes.json).
	StateDir string
	// Evaluate evaluates a policy on a disk; nil: policy.Policy.Evaluate.
	Evaluate func(*policy.Policy, *sysfs.Device) policy.Evaluation
}

// NoWaitTester fills in a disk's NoWait, or the reason it is unknown.
type NoWaitTester interface {
	Fill(*sysfs.Device)
}

// Scope is how much of a disk is read.
type Scope struct {
	Facts  sysfs.Facts
	NoWait bool // test NOWAIT on the disk's node
}

// ScopeFor is what pol tests and sets, and no more: plan, apply and the
// daemon's passes cost a few files a disk, where reading every fact opens
// dozens and the NOWAIT test opens the disk's device node.
func ScopeFor(pol *policy.Policy) Scope {
	return Scope{Facts: pol.Needs(), NoWait: pol.UsesNoWait()}
}

// Everything is every fact, and NOWAIT: a disk shown whole.
func Everything() Scope { return Scope{Facts: sysfs.FactAll, NoWait: true} }

// Read reads sc of an open disk. Writes made later through disk reach this
// disk or fail, never another that took its name since. ident, when known
// (from the disk's uevent), spares a read of its device number. prev is the
// disk as last read, nil when none: when it is the same disk (same device
// number and diskseq) and its NOWAIT was tested, the answer is kept, as it
// is a driver property and a test that could not tell (the node would not
// open) is not repeated on every read.
//
// A disk whose queue/ directory is missing is being added or removed: the
// kernel registers the queue after the disk's directory and unregisters it
// first (block/genhd.c device_add_disk, del_gendisk). It reads like a
// bio-based disk (no scheduler, no hardware queues), but every disk with a
// registered queue has queue/, bio-based ones included; such a disk is
// reported gone (sysfs.Gone), not planned as bio-based.
func (p *Pipeline) Read(disk *sysfs.Disk, sc Scope, ident sysfs.Ident, prev *sysfs.Device) (*sysfs.Device, error) {
	dev, err := disk.Read(sc.Facts, ident)
	if err != nil {
		return nil, err
	}
	// disk.Read notes a missing queue/ among dev.Errors: only then is it
	// looked for, so a disk with its queue costs no lookup more.
	if dev.Scheduler == nil && len(dev.Errors) > 0 && !p.queueDirExists(dev) {
		return nil, fmt.Errorf("%w: %s (it has no queue/ directory: being removed, or still being added)", sysfs.ErrNoDevice, dev.Name)
	}
	switch {
	case prev != nil && NoWaitTested(prev) && prev.MajorMinor == dev.MajorMinor && prev.DiskSeq == dev.DiskSeq:
		dev.NoWait, dev.NoWaitReason = prev.NoWait, prev.NoWaitReason
	case sc.NoWait:
		p.Nodes.Fill(dev)
	}
	return dev, nil
}

// NoWaitTested reports whether dev holds the answer of a NOWAIT test (a
// yes, a no, or why it could not tell).
func NoWaitTested(dev *sysfs.Device) bool { return dev.NoWait != nil || dev.NoWaitReason != "" }

func (p *Pipeline) queueDirExists(dev *sysfs.Device) bool {
	st, err := os.Stat(filepath.Join(p.FS.Root(), filepath.FromSlash(dev.Path), "queue"))
	return err == nil && st.IsDir()
}

// EvaluatePolicy evaluates pol on dev.
func (p *Pipeline) EvaluatePolicy(pol *policy.Policy, dev *sysfs.Device) policy.Evaluation {
	if p.Evaluate != nil {
		return p.Evaluate(pol, dev)
	}
	return pol.Evaluate(dev)
}

// ProbeDecision is what a [rule.probe] means for a disk: the rule that
// probes it, and the decision remembered or seeded for a disk like it, if
// any. The zero value: no rule probes the disk.
type ProbeDecision struct {
	Rule  string
	Probe *policy.Probe
	// Report is the decision; nil while the disk's probe is pending.
	Report *probe.Report
}

// Probed reports whether a rule probes the disk.
func (d ProbeDecision) Probed() bool { return d.Probe != nil }

// Pending reports whether a rule probes the disk and nothing has decided
// its scheduler yet: the policy's own (the interim value) stands.
func (d ProbeDecision) Pending() bool { return d.Probe != nil && d.Report == nil }

// Decided is ev with the decision's scheduler (see decided), or ev
// as it is while there is none.
func (d ProbeDecision) Decided(ev policy.Evaluation) policy.Evaluation {
	if d.Report == nil {
		return ev
	}
	return decided(d.Report, ev, d.Rule)
}

// LookUpProbe finds the decision remembered (probes.json in StateDir) or
// seeded (pol's [daemon] probe_results) for dev under the [rule.probe] that
// matches it, younger than the rule's max_age. It reads the disk whole, the
// result's key (model, size, queues), through disk, the disk's directory
// dev was read from, when the caller holds it open, else by dev's name;
// so a caller that keeps the decision (the daemon) looks it up once per
// disk and policy. A disk no rule probes, or without a scheduler, has the
// zero decision; so has one that cannot be read whole, with the error. A
// decision found is returned with the error of a seeded file that could
// not be read, if any.
func (p *Pipeline) LookUpProbe(pol *policy.Policy, dev *sysfs.Device, disk *sysfs.Disk) (ProbeDecision, error) {
	pr, rule := pol.ProbeFor(dev)
	if pr == nil || dev.Scheduler == nil {
		return ProbeDecision{}, nil
	}
	var full *sysfs.Device
	var err error
	if disk != nil {
		full, err = disk.Read(sysfs.FactAll, sysfs.Ident{MajorMinor: dev.MajorMinor, DiskSeq: dev.DiskSeq})
	} else {
		full, err = p.FS.Device(dev.Name)
	}
	if err != nil {
		return ProbeDecision{}, err
	}
	runner := &probe.Runner{FS: p.FS, StateDir: p.StateDir, Store: probe.NewStore(p.StateDir, SeedsOf(pol))}
	rep, err := runner.Lookup(full, ProbeOptions(pr), pr.MaxAge)
	return ProbeDecision{Rule: rule, Probe: pr, Report: rep}, err
}

// seeds holds each policy's seeded results while the policy is in use.
var seeds struct {
	mu sync.Mutex
	m  map[weak.Pointer[policy.Policy]]*probe.Seeds
}

// SeedsOf is pol's seeded probe results ([daemon] probe_results): one
// probe.Seeds per policy loaded, read once on first use and shared by
// every lookup under pol, whatever the number of disks; dropped with pol.
// Its errors are not those of a disk's lookup: whoever loaded pol reports
// them (probe.Seeds.Err).
func SeedsOf(pol *policy.Policy) *probe.Seeds {
	k := weak.Make(pol)
	seeds.mu.Lock()
	defer seeds.mu.Unlock()
	if s := seeds.m[k]; s != nil {
		return s
	}
	if seeds.m == nil {
		seeds.m = map[weak.Pointer[policy.Policy]]*probe.Seeds{}
	}
	s := probe.NewSeeds(pol.Daemon.ProbeResults)
	seeds.m[k] = s
	runtime.AddCleanup(pol, func(k weak.Pointer[policy.Policy]) {
		seeds.mu.Lock()
		defer seeds.mu.Unlock()
		delete(seeds.m, k)
	}, k)
	return s
}

// Assessment is a disk with what the policy wants of it, and the plan.
type Assessment struct {
	Device *sysfs.Device
	// Eval is the policy's evaluation with the probe's decision, if any,
	// as the scheduler setting.
	Eval  policy.Evaluation
	Probe ProbeDecision
	Plan  plan.Plan
}

// Plan plans dev's settings: ev, with the probe's decision as the
// scheduler setting when there is one.
func (p *Pipeline) Plan(dev *sysfs.Device, ev policy.Evaluation, dec ProbeDecision) Assessment {
	ev = dec.Decided(ev)
	return Assessment{Device: dev, Eval: ev, Probe: dec, Plan: plan.For(dev, ev)}
}

// Assess is read, evaluate, probe decision and plan for an open disk, the
// decision looked up afresh. probeErr is the decision's look-up error: the
// assessment stands without a decision (or with the one found).
func (p *Pipeline) Assess(pol *policy.Policy, disk *sysfs.Disk, sc Scope) (a Assessment, probeErr error, err error) {
	dev, err := p.Read(disk, sc, sysfs.Ident{}, nil)
	if err != nil {
		return Assessment{}, nil, err
	}
	ev := p.EvaluatePolicy(pol, dev)
	dec, probeErr := p.LookUpProbe(pol, dev, disk)
	return p.Plan(dev, ev, dec), probeErr, nil
}

// Write makes pl's changes on its disk, through q (the disk's queue), with
// a's retries and dry run, holding the disk's lock
// in locks around them: no probe starts switching the disk's scheduler
// while they run, and none runs when they start (two scheduler switches at
// once on one queue can crash the kernel, and a probe would put its
// originals back over these writes when it ends). prepare, when not nil,
// runs under the lock before the first write. A lock held by another is an
// error for which disklock.IsBusy holds, and nothing is written. A dry run
// (a.DryRun) writes nothing and takes no lock.
func (p *Pipeline) Write(ctx context.Context, locks *disklock.Locks, a apply.Applier, q apply.Queue, pl plan.Plan, prepare func()) (apply.Result, error) {
	if !a.DryRun {
		unlock, err := locks.LockToWrite(pl.Name)
		if err != nil {
			return apply.Result{Device: pl.Name}, err
		}
		defer unlock()
	}
	if prepare != nil {
		prepare()
	}
	return a.ApplyTo(ctx, q, pl), nil
}
