package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/policy"
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

// assess reads the disks (all, or the named ones), evaluates the policy on
// each and plans it. warnings hold the disks that could not be read and, for
// a policy an admin wrote, applied to every disk, the rules that matched
// none (the embedded default covers hardware most machines lack, by design).
func (e *env) assess(names []string) (p *policy.Policy, as []assessment, warnings []string, err error) {
	p, err = e.loadPolicy()
	if err != nil {
		return nil, nil, nil, err
	}
	devs, warnings, err := e.readDevices(names, true)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, d := range devs {
		ev := p.Evaluate(d)
		as = append(as, assessment{dev: d, eval: ev, plan: plan.For(d, ev)})
	}
	warnings = append(warnings, e.warnWriters(as)...)
	// Named disks: the rules for the others are not expected to match.
	if len(names) == 0 && !slices.Equal(p.Sources, []string{policy.EmbeddedName}) {
		warnings = append(warnings, unmatchedRules(p, as)...)
	}
	return p, as, warnings, nil
}

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
