package cli

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
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

// diskResult is one disk assessed, or why it could not be.
type diskResult struct {
	name string
	pipeline.Assessment
	// probeErr is why the probe decision could not be looked up (the
	// assessment stands without it).
	probeErr error
	err      error // sysfs.Gone(err): the disk is not there (any more)
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
func (e *env) assess(names []string, sc func(*policy.Policy) pipeline.Scope, limit int, then func(*pipeline.Pipeline, *diskResult, *sysfs.Disk)) (p *policy.Policy, results []diskResult, warnings []string, err error) {
	p, err = e.loadPolicy()
	if err != nil {
		return nil, nil, nil, err
	}
	pipe, err := e.pipeline()
	if err != nil {
		return nil, nil, nil, err
	}
	fs := pipe.FS
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
		r.Assessment, r.probeErr, r.err = pipe.Assess(p, disk, scope)
		if r.err != nil {
			return
		}
		if then != nil {
			then(pipe, r, disk)
		}
	})
	// The seeded probe results' errors are the policy's: once, not a
	// disk's look-up each.
	for _, se := range probe.SplitErrors(pipeline.SeedsOf(p).Err()) {
		warnings = append(warnings, se.Error())
	}
	warnings = append(warnings, e.warnWriters(results)...)
	as := make([]pipeline.Assessment, 0, len(results))
	for _, r := range results {
		if r.err == nil {
			as = append(as, r.Assessment)
		}
	}
	// Named disks: the rules for the others are not expected to match.
	if all && !slices.Equal(p.Sources, []string{policy.EmbeddedName}) {
		warnings = append(warnings, unmatchedRules(p, as)...)
	}
	return p, results, warnings, nil
}

// pipeline is the disks' pipeline for the command's flags.
func (e *env) pipeline() (*pipeline.Pipeline, error) {
	fs, err := e.fs()
	if err != nil {
		return nil, err
	}
	return &pipeline.Pipeline{FS: fs, Nodes: advisedNodes{devnode.NodesFor(e.sysfsRoot, e.devDir)}, StateDir: e.stateDir}, nil
}

// advisedNodes tests NOWAIT as devnode.Nodes does, and where no node is
// opened (a tree that is not this machine's, no --dev) says how to have
// them tested.
type advisedNodes struct{ devnode.Nodes }

func (n advisedNodes) Fill(dev *sysfs.Device) {
	n.Nodes.Fill(dev)
	if n.Refused() {
		dev.NoWaitReason += ": pass --dev DIR to test them"
	}
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
func unmatchedRules(p *policy.Policy, as []pipeline.Assessment) []string {
	hits := map[string]bool{}
	for _, a := range as {
		for _, r := range a.Eval.Matched {
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
