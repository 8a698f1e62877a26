package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/iosched/iosched/devnode"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/probe"
	"github.com/iosched/iosched/sysfs"
)

// loadPolicy loads the policy named by --policy (or the default locations,
// or the embedded default). An invalid policy is exit 1 with every error, one
// per line.
func (e *env) loadPolicy() (*policy.Policy, error) {
	p, err := policy.Load(e.policy)
	if err != nil {
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				fmt.Fprintln(e.stderr, pe.Error())
			}
			return nil, &ExitError{Code: 1, Msg: fmt.Sprintf("the policy has %d error(s)", len(perrs))}
		}
		return nil, &ExitError{Code: 1, Msg: err.Error()}
	}
	return p, nil
}

// assessment is one disk with what the policy wants for it and the plan.
type assessment struct {
	dev  *sysfs.Device
	eval policy.Evaluation
	plan plan.Device
}

// readScope is how much of each disk a command reads.
type readScope struct {
	facts  sysfs.Facts
	nowait bool // test NOWAIT on the device node
}

// everything is what list and explain show: every fact, and NOWAIT.
func everything() readScope { return readScope{facts: sysfs.FactAll, nowait: true} }

// neededBy is what p tests and sets, and no more, as the daemon reads a
// disk: plan and apply on 1000 disks cost a few files each, where every
// fact is 29 opens a disk and the NOWAIT test opens its device node.
func neededBy(p *policy.Policy) readScope {
	return readScope{facts: p.Needs(), nowait: p.UsesNoWait()}
}

// diskResult is one disk assessed, or why it could not be.
type diskResult struct {
	name string
	assessment
	err error // sysfs.Gone(err): the disk is not there (any more)
}

// assess loads the policy, then reads (what the policy needs of) the disks,
// all or the named ones, evaluates the policy on each and plans it. With
// then, each disk is handed to it in the disk's own goroutine with its
// directory still open (apply writes through it); up to limit disks are
// done at once. Disks that could not be read are in results with their
// error; the caller says what that means (a skipped disk, or a named one
// gone). warnings hold, for a policy an admin wrote applied to every disk,
// the rules that matched none (the embedded default covers hardware most
// machines lack, by design).
func (e *env) assess(names []string, sc func(*policy.Policy) readScope, limit int, then func(*diskResult, *sysfs.Disk)) (p *policy.Policy, results []diskResult, warnings []string, err error) {
	p, err = e.loadPolicy()
	if err != nil {
		return nil, nil, nil, err
	}
	fs, err := e.fs()
	if err != nil {
		return nil, nil, nil, err
	}
	all := len(names) == 0
	if all {
		if names, err = fs.Disks(); err != nil {
			return nil, nil, nil, err
		}
	}
	scope := sc(p)
	results = make([]diskResult, 0, len(names))
	for _, n := range dedupe(names) {
		results = append(results, diskResult{name: n})
	}
	// Named disks are opened first, all of them: a partition named where a
	// disk is expected is a mistake in the command, not a disk that went
	// away, and the whole command is refused before anything is written.
	var opened []*sysfs.Disk
	var openErrs []error
	if !all {
		opened, openErrs = make([]*sysfs.Disk, len(results)), make([]error, len(results))
		concurrently(len(results), limit, func(i int) {
			opened[i], openErrs[i] = fs.OpenDisk(results[i].name)
		})
		if msg := partitionsNamed(openErrs); msg != "" {
			for _, d := range opened {
				if d != nil {
					d.Close()
				}
			}
			return nil, nil, nil, &ExitError{Code: 1, Msg: msg}
		}
	}
	concurrently(len(results), limit, func(i int) {
		r := &results[i]
		var disk *sysfs.Disk
		var err error
		if opened != nil {
			disk, err = opened[i], openErrs[i]
		} else {
			disk, err = fs.OpenDisk(r.name)
		}
		if err != nil {
			r.err = err
			return
		}
		defer disk.Close()
		dev, err := e.readDisk(fs, disk, r.name, scope)
		if err != nil {
			r.err = err
			return
		}
		ev := e.withProbeDecision(p, fs, dev, p.Evaluate(dev))
		r.assessment = assessment{dev: dev, eval: ev, plan: plan.For(dev, ev)}
		if then != nil {
			then(r, disk)
		}
	})
	warnings = append(warnings, e.warnWriters(results)...)
	as := make([]assessment, 0, len(results))
	for _, r := range results {
		if r.err == nil {
			as = append(as, r.assessment)
		}
	}
	// Named disks: the rules for the others are not expected to match.
	if all && !slices.Equal(p.Sources, []string{policy.EmbeddedName}) {
		warnings = append(warnings, unmatchedRules(p, as)...)
	}
	return p, results, warnings, nil
}

// readDisk reads what sc asks of an open disk. Writes made through the
// open directory reach this disk or fail, never another that took its name
// since.
//
// A disk whose queue/ directory is missing is being added or removed: the
// kernel registers the queue after the disk's directory and unregisters it
// first (block/genhd.c device_add_disk, del_gendisk). It reads like a
// bio-based disk (no scheduler, no hardware queues), but every disk with a
// registered queue has queue/, bio-based ones included; such a disk is
// reported gone, not planned as bio-based.
func (e *env) readDisk(fs sysfs.FS, disk *sysfs.Disk, name string, sc readScope) (*sysfs.Device, error) {
	dev, err := disk.Read(sc.facts, sysfs.Ident{})
	if err == nil && dev.Scheduler == nil && !queueDirExists(fs, dev) {
		err = fmt.Errorf("%w: %s (it has no queue/ directory: being removed, or still being added)", sysfs.ErrNoDevice, name)
	}
	if err != nil {
		return nil, err
	}
	if sc.nowait {
		nodes := devnode.NodesFor(e.sysfsRoot, e.devDir)
		nodes.Fill(dev)
		if nodes.Refused() {
			dev.NoWaitReason += ": pass --dev DIR to test them"
		}
	}
	return dev, nil
}

// partitionsNamed words the partitions among errs, one per line, or "".
func partitionsNamed(errs []error) string {
	var msgs []string
	for _, err := range errs {
		var pe *sysfs.PartitionError
		if errors.As(err, &pe) {
			msgs = append(msgs, printable(pe.Error()))
		}
	}
	return strings.Join(msgs, "\niosched: ")
}

func queueDirExists(fs sysfs.FS, dev *sysfs.Device) bool {
	st, err := os.Stat(filepath.Join(fs.Root(), filepath.FromSlash(dev.Path), "queue"))
	return err == nil && st.IsDir()
}

// dedupe drops repeated names, keeping the first: "plan vda vda" shows vda
// once.
func dedupe(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// concurrently calls fn(0..n-1), up to limit at once.
func concurrently(n, limit int, fn func(i int)) {
	if limit < 1 {
		limit = 1
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, limit) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// readLimit is how many disks are read at once when nothing is written:
// reading sysfs is CPU work (and kernfs's lock), so a few per CPU.
func readLimit() int { return 2 * runtime.GOMAXPROCS(0) }

// unmatchedRules words the rules of p that matched none of the disks.
func unmatchedRules(p *policy.Policy, as []assessment) []string {
	hits := map[string]bool{}
	for _, a := range as {
		for _, r := range a.eval.Matched {
			hits[r] = true
		}
	}
	var w []string
	for _, r := range p.Rules {
		if !hits[r.Name] {
			w = append(w, fmt.Sprintf("rule %q matches no disk present", r.Name))
		}
	}
	return w
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// showFrom is a change's current value, or what it waits for.
func showFrom(c plan.Change) string {
	if c.After != "" {
		return "(after " + c.After + ")"
	}
	return c.From
}

// withProbeDecision is ev with the scheduler a remembered or seeded probe
// chose for dev, as the daemon applies it (probe.Report.Decided), so that
// plan and apply agree with the daemon instead of undoing its choice. No
// decision (or none to be read: plan's note says why): ev as it is.
func (e *env) withProbeDecision(p *policy.Policy, fs sysfs.FS, dev *sysfs.Device, ev policy.Evaluation) policy.Evaluation {
	pr, rule := p.ProbeFor(dev)
	if pr == nil || dev.Scheduler == nil || e.stateDir == "" {
		return ev
	}
	full, err := fs.Device(dev.Name) // the result's key: model, size, queues
	if err != nil {
		return ev
	}
	runner := &probe.Runner{FS: fs, DevDir: e.devDir, StateDir: e.stateDir, Store: probe.OpenStore(e.stateDir, p.Daemon.ProbeResults)}
	rep, _ := runner.Lookup(full, probe.FromPolicy(pr), pr.MaxAge)
	if rep == nil {
		return ev
	}
	return rep.Decided(ev, rule)
}
