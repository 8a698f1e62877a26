package pipeline

import (
	"slices"
	"strconv"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
)

// The probe measures and knows nothing of the policy: what a rule asks of
// it, and what its report makes of the rule's settings, are decided here.

// ProbeOptions turns a rule's [rule.probe] into a probe's options.
func ProbeOptions(p *policy.Probe) probe.Options {
	o := p.Options
	o.Candidates = slices.Clone(o.Candidates)
	o.Depths = slices.Clone(o.Depths)
	o.NrRequests = slices.Clone(o.NrRequests)
	return probe.Options{Options: o}
}

// decided is ev with the scheduler r chose as the disk's scheduler
// setting, the probe's provenance beside the rule's name
// (`x (probe: none 143K IOPS vs ...)`): what the daemon applies, and what
// plan and apply show, so that the three agree. A scheduler setting of
// the policy's is overridden (it was the interim value until the probe
// decided); without one, the decision is inserted first, where the
// scheduler is written. A probe that measured nr_requests decides it too
// (Decision.WinnerNr), the same way: the plan writes it after the
// scheduler, whose switch resets it.
func decided(r *probe.Report, ev policy.Evaluation, rule string) policy.Evaluation {
	settings := slices.Clone(ev.Settings)
	set := func(attr, value string, at int) {
		s := policy.Setting{Attribute: attr, Values: []string{value}, Rule: rule + " (" + r.Provenance + ")"}
		i := slices.IndexFunc(settings, func(x policy.Setting) bool { return x.Attribute == s.Attribute })
		if i >= 0 {
			s.Overrode = slices.Concat(settings[i].Overrode, []string{settings[i].Rule})
			settings[i] = s
		} else {
			settings = slices.Insert(settings, at, s)
		}
	}
	set("scheduler", r.Winner, 0)
	if r.WinnerNr > 0 {
		set("nr_requests", strconv.Itoa(r.WinnerNr), 1)
	}
	ev.Settings = settings
	return ev
}
