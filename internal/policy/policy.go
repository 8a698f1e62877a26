package policy

import (
	"time"

	"github.com/iosched/iosched/internal/sysfs"
)

// CONTRACT: the exported names in this file are used by plan/, cli/ and
// daemon/. Their meaning must stay; the bodies are the policy package's own.

// Policy is a parsed and validated policy: rules in order, and the daemon's
// settings.
type Policy struct {
	// Sources are the files the policy was read from, in order
	// ("<embedded>" for the built-in default).
	Sources []string
	Rules   []*Rule
	Daemon  Daemon
}

// Daemon is the [daemon] table.
type Daemon struct {
	// UeventSource is "kernel" (default) or "udev".
	UeventSource string
	// ReconcileInterval is how often every disk is re-read and drift
	// repaired; 0 disables it.
	ReconcileInterval time.Duration
	// RestoreOnExit puts back the values found before iosched changed them.
	RestoreOnExit bool
	// MetricsFile is where the daemon writes its metrics for
	// node_exporter's textfile collector ("" for nowhere, the default).
	MetricsFile string
	// ProbeConcurrency, ProbeBudget (0: no limit) and ProbeResults (globs
	// of seeded result files): see probe.go.
	ProbeConcurrency int
	ProbeBudget      time.Duration
	ProbeResults     []string
}

// Rule is one [[rule]] table.
type Rule struct {
	Name string
	// Index is the rule's 1-based position in the whole policy.
	Index int
	// Source is the file and line the rule starts at ("policy.toml:12").
	Source string

	// match must hold entirely; except entries are each a set of keys that,
	// holding entirely, keep the rule from applying.
	match    []cond
	except   [][]cond
	settings []Setting
	probe    *Probe
	adapt    *Adapt
	// adaptAt is where [rule.adapt] is, for a check made once every
	// file is read (adaptSources).
	adaptAt *Error
	// observe is how often the matched disks' stat is sampled for the
	// fleet's metrics; 0 when the rule does not observe.
	observe time.Duration
}

// Label names the rule as errors and logs do: `rule 3 "ublk"`.
func (r *Rule) Label() string { return ruleLabel(r.Index, r.Name) }

// Settings returns what the rule sets, in write order.
func (r *Rule) Settings() []Setting {
	out := make([]Setting, len(r.settings))
	for i, s := range r.settings {
		s.Values = append([]string{}, s.Values...)
		out[i] = s
	}
	return out
}

// Matches reports whether the rule applies to d: every match key holds and
// no except entry holds entirely. When it does not, the reasons say which
// keys failed (`class: virtio is not in [nvme]`) or which except keys held
// (`except: class: loop is in [loop]`). A fact the kernel did not report
// (Rotational nil, no model, ...) never satisfies a key that tests it, in
// match or in except.
func (r *Rule) Matches(d *sysfs.Device) (bool, []string) {
	if ok, failed := holds(r.match, d); !ok {
		return false, failed
	}
	for _, e := range r.except {
		if len(e) == 0 {
			continue // an empty except excludes nothing
		}
		if ok, _ := holds(e, d); ok {
			var reasons []string
			for _, why := range explainAll(e, d) {
				reasons = append(reasons, "except: "+why)
			}
			return false, reasons
		}
	}
	return true, nil
}

// Setting is one desired attribute value and where it came from.
type Setting struct {
	// Attribute is a sysfs.Attr: "scheduler", one of sysfs.Tunables(),
	// or "iosched/<param>".
	Attribute string `json:"attribute"`
	// Values are the candidates in order of preference: several only for
	// scheduler ("the first one the disk offers"), one otherwise.
	Values []string `json:"values"`
	// Rule is the name of the rule that set it: the last matching rule that
	// has it.
	Rule string `json:"rule"`
	// Overrode names the earlier matching rules whose value was replaced.
	Overrode []string `json:"overrode,omitempty"`
}

// RuleResult is one rule's verdict on one disk.
type RuleResult struct {
	Rule    string `json:"rule"`
	Index   int    `json:"index"`
	Matched bool   `json:"matched"`
	// Reasons say why a rule did not match, one per failing key:
	// `class: virtio is not in [nvme]`, or `except: class: loop is in [loop]`.
	Reasons []string `json:"reasons,omitempty"`
}

// Evaluation is the policy applied to one disk.
type Evaluation struct {
	Rules    []RuleResult `json:"rules"`
	Matched  []string     `json:"matched"`
	Settings []Setting    `json:"settings"`
}

// Evaluate matches every rule against d and merges the settings of those that
// match, later rules overriding earlier ones setting by setting.
//
// Settings come in write order (sysfs.CompareWriteOrder: the scheduler,
// nr_requests, iosched/*, the rest); each names the last matching rule that
// set it and, in Overrode, the earlier matching rules it replaced, in order.
func (p *Policy) Evaluate(d *sysfs.Device) Evaluation {
	ev, _ := p.EvaluateUntil(d, nil)
	return ev
}

// EvaluateUntil is Evaluate, asking stop (when not nil) before each rule:
// a policy of thousands of rules takes a while on each disk, and a daemon
// told to stop must not finish them all first. When stop says yes it
// returns false and an evaluation of the rules before, which must not be
// used.
func (p *Policy) EvaluateUntil(d *sysfs.Device, stop func() bool) (Evaluation, bool) {
	ev := Evaluation{Rules: []RuleResult{}, Matched: []string{}, Settings: []Setting{}}
	byAttr := map[string]int{} // attribute -> index in ev.Settings
	for _, r := range p.Rules {
		if stop != nil && stop() {
			return ev, false
		}
		ok, reasons := r.Matches(d)
		ev.Rules = append(ev.Rules, RuleResult{Rule: r.Name, Index: r.Index, Matched: ok, Reasons: reasons})
		if !ok {
			continue
		}
		ev.Matched = append(ev.Matched, r.Name)
		for _, s := range r.settings {
			s.Values = append([]string{}, s.Values...)
			s.Rule = r.Name
			if i, seen := byAttr[s.Attribute]; seen {
				prev := ev.Settings[i]
				s.Overrode = append(append([]string{}, prev.Overrode...), prev.Rule)
				ev.Settings[i] = s
				continue
			}
			byAttr[s.Attribute] = len(ev.Settings)
			ev.Settings = append(ev.Settings, s)
		}
	}
	sortSettings(ev.Settings)
	return ev, true
}

// Needs is what a disk must be read for to evaluate and plan this policy:
// the facts its rules test and the current values of what they set. The
// NOWAIT test (match key nowait) is a device node's, not sysfs's: see
// UsesNoWait.
func (p *Policy) Needs() sysfs.Facts {
	var f sysfs.Facts
	for _, r := range p.Rules {
		for _, cs := range append([][]cond{r.match}, r.except...) {
			for _, c := range cs {
				f |= c.from.facts
			}
		}
		for _, s := range r.settings {
			f |= sysfs.Attr(s.Attribute).Facts()
		}
		if r.observe > 0 {
			// The metrics name an observed disk's hardware key, which
			// the fleet joins with probe results of the same key: it
			// must be read as a probe reads it.
			f |= identityFacts
		}
		if r.probe != nil {
			// A probe's decision is planned as a setting: the
			// scheduler, and nr_requests when the probe measures it.
			f |= sysfs.Attr("scheduler").Facts()
			if len(r.probe.NrRequests) > 0 {
				f |= sysfs.Attr("nr_requests").Facts()
			}
		}
	}
	return f
}

// identityFacts are what a disk's hardware key (probe.KeyOf) and its
// rotational flag are read from.
const identityFacts = sysfs.FactIdentity | sysfs.FactSize | sysfs.FactHWQueues | sysfs.FactRotational

// UsesNoWait reports whether any rule tests a key that opens the disk's
// node (nowait), which costs more than the rest of a pass.
func (p *Policy) UsesNoWait() bool {
	for _, r := range p.Rules {
		for _, cs := range append([][]cond{r.match}, r.except...) {
			for _, c := range cs {
				if c.from.nodeTest {
					return true
				}
			}
		}
	}
	return false
}
