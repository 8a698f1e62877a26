package policy

import (
	"math"
	"slices"
	"time"

	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// Adapt is a [rule.adapt] table: switch a matching disk between its probe
// candidates by the depth its workload runs at. Unset keys have
// adaptopt.Default's values; the options, their limits and their one
// validation are package adaptopt's.
type Adapt struct {
	adaptopt.Options
}

// DefaultAdapt is what an empty [rule.adapt] means.
func DefaultAdapt() Adapt { return Adapt{Options: adaptopt.Default()} }

// Adapt returns the rule's [rule.adapt], nil when it has none.
func (r *Rule) Adapt() *Adapt { return r.adapt }

// AdaptFor returns the [rule.adapt] in force for d: the last matching
// rule's that has one (a later rule's table overrides an earlier one's
// whole), and that rule's name; nil when no matching rule adapts.
func (p *Policy) AdaptFor(d *sysfs.Device) (*Adapt, string) {
	r := p.lastMatching(d, func(r *Rule) bool { return r.adapt != nil })
	if r == nil {
		return nil, ""
	}
	return r.adapt, r.Name
}

var adaptKeys = []string{"sample", "window", "margin", "min_interval", "max_switches_per_day", "guard"}

// adaptTable reads [rule.adapt]: each key's value into the options, then
// the options' one validation (adaptopt.Options.Problems), each problem
// reported at the key it is about.
func (d *decoder) adaptTable(l loc, v any) *Adapt {
	m, ok := d.table(l, v, "[rule.adapt]")
	if !ok {
		return nil
	}
	a := DefaultAdapt()
	given := map[string]loc{} // the keys read, for where problems are
	var order []string        // given's keys, in the file's order
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		v := m[k]
		read := false
		switch k {
		case "sample", "window", "min_interval":
			s, ok := d.str(kl, v)
			if !ok {
				break
			}
			dur, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(kl, "%q is not a duration: want a number with a unit, such as \"5s\" or \"10m\"", s)
			case dur < 0:
				d.errorf(kl, "%s is negative", s)
			default:
				read = true
				switch k {
				case "sample":
					a.Sample = dur
				case "window":
					a.Window = dur
				default:
					a.MinInterval = dur
				}
			}
		case "margin":
			s, ok := v.(string)
			if !ok {
				d.errorf(kl, "want a percentage as a string, such as \"10%%\", not %s", typeName(v))
				break
			}
			f, err := ParseMargin(s)
			if read = err == nil; err != nil {
				d.errorf(kl, "%v", err)
			} else {
				a.Margin = f
			}
		case "max_switches_per_day":
			n, ok := d.integer(kl, v)
			if read = ok; ok {
				a.MaxSwitchesPerDay = int(max(min(n, math.MaxInt32), math.MinInt32))
			}
		case "guard":
			b, ok := v.(bool)
			if read = ok; ok {
				a.Guard = b
			} else {
				d.errorf(kl, "want true or false, not %s", typeName(v))
			}
		default:
			d.unknownKey(kl, k, adaptKeys, "[rule.adapt]")
			continue
		}
		if read {
			given[k] = kl
			order = append(order, k)
		}
	}
	for _, pr := range a.Problems() {
		// A problem of two keys is reported at the later one given; one
		// about a key whose value was refused above is that refusal.
		var at *loc
		skip := false
		for _, k := range pr.Keys {
			if _, ok := m[k]; ok {
				if _, ok := given[k]; !ok {
					skip = true
				}
			}
		}
		if skip {
			continue
		}
		for _, k := range order {
			if kl, ok := given[k]; ok && slices.Contains(pr.Keys, k) {
				at = &kl
			}
		}
		if at == nil {
			d.errorf(l, "%s", pr)
		} else {
			d.errorf(*at, "%s", pr.Msg)
		}
	}
	return &a
}

// needsCurvesMsg is the error of a [rule.adapt] with nothing to read
// curves from.
const needsCurvesMsg = "an adaptive rule reads its disks' probe curves, and none can come: add [rule.probe] to this rule, or name seeded results in [daemon] probe_results"

// adaptSources checks, once every file is read ([daemon] may come in a
// later file than the rule), that each [rule.adapt] has curves to read:
// the rule probes, or the policy names seeded results. The error is put
// in the rule's file's list.
func adaptSources(p *Policy, errs []Errors, fileOf map[*Rule]int) {
	for _, r := range p.Rules {
		// Adapting reads one curve a scheduler and switches the
		// scheduler alone: candidates that differ by nr_requests would
		// share a scheduler's curve.
		if r.adapt != nil && r.adaptAt != nil && r.probe != nil && len(r.probe.NrRequests) > 0 {
			e := *r.adaptAt
			e.Msg = "an adaptive rule switches schedulers by one curve each, and its [rule.probe] measures nr_requests too: size nr_requests in a rule without [rule.adapt]"
			i := fileOf[r]
			errs[i] = append(errs[i], &e)
		}
	}
	if len(p.Daemon.ProbeResults) > 0 {
		return
	}
	for _, r := range p.Rules {
		if r.adapt == nil || r.probe != nil || r.adaptAt == nil {
			continue
		}
		e := *r.adaptAt
		e.Msg = needsCurvesMsg
		i := fileOf[r]
		errs[i] = append(errs[i], &e)
	}
}
