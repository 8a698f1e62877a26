package policy

import (
	"time"

	"github.com/iosched/iosched/sysfs"
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
}

// Rule is one [[rule]] table.
type Rule struct {
	Name string
	// Index is the rule's 1-based position in the whole policy.
	Index int
	// Source is the file and line the rule starts at ("policy.toml:12").
	Source string
}

// Setting is one desired attribute value and where it came from.
type Setting struct {
	// Attribute is "scheduler", a name in sysfs.Tunables, or
	// "iosched/<param>".
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
func (p *Policy) Evaluate(d *sysfs.Device) Evaluation {
	panic("policy.Evaluate: not written yet")
}
