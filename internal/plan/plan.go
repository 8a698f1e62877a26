package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

// Change is one attribute to write.
type Change struct {
	Attribute string `json:"attribute"`
	// From is the value seen when planning; "" when an earlier write of
	// this plan (After) may change it, so apply reads it again first.
	From string `json:"from"`
	To   string `json:"to"`
	Rule string `json:"rule"`
	// After names that earlier write ("scheduler", "nr_requests").
	After string `json:"after,omitempty"`
}

// Skip is a setting the policy wants that cannot be made on this disk.
type Skip struct {
	Attribute string `json:"attribute"`
	Reason    string `json:"reason"`
	Rule      string `json:"rule,omitempty"`
}

// Plan is the plan for one disk.
type Plan struct {
	Name    string      `json:"name"`
	Class   sysfs.Class `json:"class"`
	Rules   []string    `json:"rules"`
	Changes []Change    `json:"changes"`
	Skipped []Skip      `json:"skipped"`
	// Errors are settings the policy wants that could not be planned
	// because a fact could not be read: plan and apply fail on them.
	Errors []string `json:"errors"`
	// Warnings are the disk's read problems that did not stop anything.
	Warnings []string `json:"warnings"`
}

// Empty reports whether nothing would be written.
func (p *Plan) Empty() bool { return len(p.Changes) == 0 }

// For plans d against what the policy evaluation wants for it. Changes come
// in write order (sysfs.CompareWriteOrder). A setting an earlier change may
// reset (sysfs.Attr.Resets) is planned even when the snapshot shows it in
// place, with an empty From: apply reads it again after that write, and
// writes it only if it moved.
func For(d *sysfs.Device, ev policy.Evaluation) Plan {
	p := Plan{
		Name:     d.Name,
		Class:    d.Class,
		Rules:    append([]string{}, ev.Matched...),
		Changes:  []Change{},
		Skipped:  []Skip{},
		Errors:   []string{},
		Warnings: append([]string{}, d.Errors...),
	}
	settings := slices.Clone(ev.Settings)
	sysfs.SortByWriteOrder(settings, func(s policy.Setting) string { return s.Attribute })

	// The scheduler the disk will run once the plan is applied.
	var current, target string
	if d.Scheduler != nil {
		current = *d.Scheduler
		target = current
	}
	unreadable := d.Scheduler == nil && !d.BioBased()

	for _, s := range settings {
		want := s.Values[0]
		attr := sysfs.Attr(s.Attribute)
		kind, param := attr.Kind(), attr.Param()
		switch {
		case (kind == sysfs.KindScheduler || kind == sysfs.KindParam) && unreadable:
			p.Errors = append(p.Errors, fmt.Sprintf("%s: not planned: the current scheduler could not be read (rule %q)", s.Attribute, s.Rule))
		case kind == sysfs.KindScheduler:
			if d.BioBased() {
				p.skip(s, "no scheduler on a bio-based disk")
			} else if chosen, ok := firstOffered(s.Values, d.Schedulers); !ok {
				p.skip(s, fmt.Sprintf("%s not offered: the disk offers %s", strings.Join(s.Values, ", "), strings.Join(d.Schedulers, " ")))
			} else if target = chosen; chosen != current {
				p.Changes = append(p.Changes, Change{Attribute: s.Attribute, From: current, To: chosen, Rule: s.Rule})
			}
		case kind == sysfs.KindParam:
			switch {
			case d.BioBased():
				p.skip(s, "no scheduler on a bio-based disk")
			case target == "none":
				p.skip(s, "scheduler none has no parameters")
			case !sysfs.HasParam(target, param):
				p.skip(s, fmt.Sprintf("%s is not a parameter of %s", param, target))
			default:
				have, ok := d.Value(attr)
				if after := p.resetBy(s.Attribute); after != "" {
					p.Changes = append(p.Changes, Change{Attribute: s.Attribute, To: want, Rule: s.Rule, After: after})
				} else if !ok {
					p.skip(s, fmt.Sprintf("%s is not a parameter of %s here", param, target))
				} else if have != want {
					p.Changes = append(p.Changes, Change{Attribute: s.Attribute, From: have, To: want, Rule: s.Rule})
				}
			}
		default:
			have, ok := d.Value(attr)
			spec, _ := attr.Spec()
			switch after := p.resetBy(s.Attribute); {
			case !ok && d.BioBased() && spec.MQOnly:
				p.skip(s, "no scheduler on a bio-based disk")
			case !ok:
				p.skip(s, "the kernel does not offer it on this disk")
			case after != "":
				p.Changes = append(p.Changes, Change{Attribute: s.Attribute, To: want, Rule: s.Rule, After: after})
			case have != want:
				p.Changes = append(p.Changes, Change{Attribute: s.Attribute, From: have, To: want, Rule: s.Rule})
			}
		}
	}
	return p
}

// resetBy names the latest change planned so far that may reset attr, or "".
func (p *Plan) resetBy(attr string) string {
	for i := len(p.Changes) - 1; i >= 0; i-- {
		if sysfs.Attr(p.Changes[i].Attribute).Resets(sysfs.Attr(attr)) {
			return p.Changes[i].Attribute
		}
	}
	return ""
}

func (p *Plan) skip(s policy.Setting, reason string) {
	p.Skipped = append(p.Skipped, Skip{Attribute: s.Attribute, Reason: reason, Rule: s.Rule})
}

func firstOffered(candidates, offered []string) (string, bool) {
	for _, c := range candidates {
		if slices.Contains(offered, c) {
			return c, true
		}
	}
	return "", false
}
