package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

// Change is one attribute to write.
type Change struct {
	Attribute string `json:"attribute"`
	// From is the value seen when planning; "" for a scheduler parameter
	// whose value only exists once the scheduler is switched.
	From string `json:"from"`
	To   string `json:"to"`
	Rule string `json:"rule"`
}

// Skip is a setting the policy wants that cannot be made on this disk.
type Skip struct {
	Attribute string `json:"attribute"`
	Reason    string `json:"reason"`
	Rule      string `json:"rule,omitempty"`
}

// Device is the plan for one disk.
type Device struct {
	Name    string      `json:"name"`
	Class   sysfs.Class `json:"class"`
	Rules   []string    `json:"rules"`
	Changes []Change    `json:"changes"`
	Skipped []Skip      `json:"skipped"`
	Errors  []string    `json:"errors"`
}

// Empty reports whether nothing would be written.
func (d *Device) Empty() bool { return len(d.Changes) == 0 }

// mqOnly are the tunables the kernel hides on a bio-based queue
// (block/blk-sysfs.c queue_attr_visible / blk_mq_queue_attr_visible).
var mqOnly = map[string]bool{"nr_requests": true, "wbt_lat_usec": true, "rq_affinity": true, "io_timeout": true}

// sortChanges puts changes in write order (sysfs.WriteRank), by name
// within a rank.
func sortChanges(cs []Change) {
	sort.SliceStable(cs, func(i, j int) bool {
		oi, oj := sysfs.WriteRank(cs[i].Attribute), sysfs.WriteRank(cs[j].Attribute)
		if oi != oj {
			return oi < oj
		}
		return cs[i].Attribute < cs[j].Attribute
	})
}

// For plans d against what the policy evaluation wants for it.
func For(d *sysfs.Device, ev policy.Evaluation) Device {
	p := Device{
		Name:    d.Name,
		Class:   d.Class,
		Rules:   append([]string{}, ev.Matched...),
		Changes: []Change{},
		Skipped: []Skip{},
		Errors:  append([]string{}, d.Errors...),
	}
	if p.Rules == nil {
		p.Rules = []string{}
	}
	byAttr := map[string]policy.Setting{}
	for _, s := range ev.Settings {
		byAttr[s.Attribute] = s
	}

	// The scheduler the disk will run once the plan is applied.
	var current, target string
	if d.Scheduler != nil {
		current = *d.Scheduler
		target = current
	}
	if s, ok := byAttr["scheduler"]; ok {
		switch {
		case d.BioBased():
			p.skip(s, "no scheduler on a bio-based disk")
		case d.Scheduler == nil:
			p.skip(s, "the current scheduler could not be read (see errors)")
		default:
			if chosen, ok := firstOffered(s.Values, d.Schedulers); ok {
				target = chosen
				if chosen != current {
					p.Changes = append(p.Changes, Change{"scheduler", current, chosen, s.Rule})
				}
			} else {
				p.skip(s, fmt.Sprintf("%s not offered (%s)", strings.Join(s.Values, ", "), strings.Join(d.Schedulers, " ")))
			}
		}
	}
	switched := target != current

	for _, s := range ev.Settings {
		if s.Attribute == "scheduler" {
			continue
		}
		want := s.Values[0]
		if param, ok := strings.CutPrefix(s.Attribute, "iosched/"); ok {
			switch {
			case d.BioBased():
				p.skip(s, "no scheduler on a bio-based disk")
			case d.Scheduler == nil:
				p.skip(s, "the current scheduler could not be read (see errors)")
			case target == "none":
				p.skip(s, "scheduler none has no parameters")
			case switched:
				// Known only once the switch is made; apply reads it then.
				p.Changes = append(p.Changes, Change{s.Attribute, "", want, s.Rule})
			default:
				have, ok := d.IOSched[param]
				switch {
				case !ok:
					p.skip(s, fmt.Sprintf("not a parameter of %s", target))
				case have != want:
					p.Changes = append(p.Changes, Change{s.Attribute, have, want, s.Rule})
				}
			}
			continue
		}
		have, ok := d.Tunables[s.Attribute]
		switch {
		case !ok && d.BioBased() && mqOnly[s.Attribute]:
			p.skip(s, "no scheduler on a bio-based disk")
		case !ok:
			p.skip(s, "the kernel does not offer it on this disk")
		case have != want:
			p.Changes = append(p.Changes, Change{s.Attribute, have, want, s.Rule})
		}
	}
	sortChanges(p.Changes)
	sort.SliceStable(p.Skipped, func(i, j int) bool {
		return sysfs.WriteRank(p.Skipped[i].Attribute) < sysfs.WriteRank(p.Skipped[j].Attribute)
	})
	return p
}

func (p *Device) skip(s policy.Setting, reason string) {
	p.Skipped = append(p.Skipped, Skip{Attribute: s.Attribute, Reason: reason, Rule: s.Rule})
}

func firstOffered(candidates, offered []string) (string, bool) {
	for _, c := range candidates {
		for _, o := range offered {
			if c == o {
				return c, true
			}
		}
	}
	return "", false
}
