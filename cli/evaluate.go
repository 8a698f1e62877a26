package cli

import (
	"errors"
	"fmt"
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
// each and plans it. unmatched lists the rules that matched none of them.
func (e *env) assess(names []string) (p *policy.Policy, as []assessment, unmatched []string, err error) {
	p, err = e.loadPolicy()
	if err != nil {
		return nil, nil, nil, err
	}
	devs, err := e.readDevices(names, true)
	if err != nil {
		return nil, nil, nil, err
	}
	hits := map[string]bool{}
	for _, d := range devs {
		ev := p.Evaluate(d)
		for _, r := range ev.Matched {
			hits[r] = true
		}
		as = append(as, assessment{dev: d, eval: ev, plan: plan.For(d, ev)})
	}
	for _, r := range p.Rules {
		if !hits[r.Name] {
			unmatched = append(unmatched, r.Name)
		}
	}
	return p, as, unmatched, nil
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// unmatchedWarnings words the rules that matched no disk.
func unmatchedWarnings(unmatched []string, scope string) []string {
	w := make([]string, 0, len(unmatched))
	for _, r := range unmatched {
		w = append(w, fmt.Sprintf("rule %q matches no %s", r, scope))
	}
	return w
}

func scope(names []string) string {
	if len(names) == 0 {
		return "disk present"
	}
	return "of the disks named"
}

func showValue(v string) string {
	if v == "" {
		return "(set by the new scheduler)"
	}
	return v
}
