package policy

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// Probe is a [rule.probe] table: measure each candidate scheduler on the
// disk, then keep the winner. Unset keys have DefaultProbe's values; the
// options and their limits are package probeopt's, which `iosched probe`
// uses too.
type Probe struct {
	probeopt.Options
	// MaxAge is how long a remembered result holds; 0 is for ever.
	MaxAge time.Duration
}

// DefaultProbe is what an empty [rule.probe] means.
func DefaultProbe() Probe { return Probe{Options: probeopt.Default()} }

// Default values of the [daemon] probe keys.
const DefaultProbeConcurrency = 1

// ParseSize reads a size as the policy does: "4KiB", "4K", "4096".
func ParseSize(s string) (uint64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return parseBytes(n)
	}
	return parseBytes(s)
}

// ParseMargin reads a percentage, "5%", as a fraction (0.05). Its range is
// probeopt.Options' to check.
func ParseMargin(s string) (float64, error) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return 0, fmt.Errorf("%q is not a percentage: want a number and %%, such as \"5%%\"", s)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a percentage: want a number and %%, such as \"5%%\"", s)
	}
	return f / 100, nil
}

// ParseMaxAge reads a Go duration, or whole days ("30d"); "0" is for ever.
func ParseMaxAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration: want \"720h\", \"30d\" or \"0\" (for ever)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: want \"720h\", \"30d\" or \"0\" (for ever)", s)
	case d < 0:
		return 0, fmt.Errorf("%s is negative", s)
	case d > 0 && d < time.Minute:
		return 0, fmt.Errorf("%s is shorter than a minute: every start would probe again", s)
	}
	return d, nil
}

// Probe returns the rule's [rule.probe], nil when it has none.
func (r *Rule) Probe() *Probe { return r.probe }

// ProbeFor returns the [rule.probe] in force for d: the last matching rule's
// that has one (a later rule overrides an earlier one's table whole), and
// that rule's name; nil when no matching rule probes.
func (p *Policy) ProbeFor(d *sysfs.Device) (*Probe, string) {
	r := p.lastMatching(d, func(r *Rule) bool { return r.probe != nil })
	if r == nil {
		return nil, ""
	}
	return r.probe, r.Name
}

// lastMatching is the last rule that has what has asks for and matches d
// (of the rules with a table, the last matching one's is in force); nil
// when none. has is tested first, so rules without the table cost no
// match.
func (p *Policy) lastMatching(d *sysfs.Device, has func(*Rule) bool) *Rule {
	var out *Rule
	for _, r := range p.Rules {
		if !has(r) {
			continue
		}
		if ok, _ := r.Matches(d); ok {
			out = r
		}
	}
	return out
}

var probeKeys = []string{"candidates", "duration", "rounds", "depth", "depths", "block_size", "engine", "choose", "margin", "max_age", "nr_requests"}

// probeTable reads [rule.probe]: each key's value into the options, then
// the options' one validation (probeopt.Options.Problems), each problem
// reported at the key it is about.
func (d *decoder) probeTable(l loc, v any) *Probe {
	m, ok := d.table(l, v, "[rule.probe]")
	if !ok {
		return nil
	}
	p := DefaultProbe()
	given := map[string]loc{} // the keys read, for where problems are
	var order []string        // given's keys, in the file's order
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		v := m[k]
		read := true
		switch k {
		case "candidates":
			list, ok := v.([]any)
			if !ok {
				d.errorf(kl, "want a list of at least two schedulers, such as [\"none\", \"mq-deadline\"], not %s", typeName(v))
				continue
			}
			names, ok := d.stringList(kl, list)
			if read = ok; ok {
				p.Candidates = names
			}
		case "duration":
			s, ok := d.str(kl, v)
			if read = ok; !ok {
				break
			}
			dur, err := time.ParseDuration(s)
			if read = err == nil; err != nil {
				d.errorf(kl, "%q is not a duration: want a number with a unit, such as \"1s\" or \"500ms\"", s)
			} else {
				p.Duration = dur
			}
		case "rounds", "depth":
			n, ok := d.integer(kl, v)
			if read = ok; ok {
				n = max(min(n, math.MaxInt), math.MinInt) // int may be narrower
				if k == "rounds" {
					p.Rounds = int(n)
				} else {
					p.Depth = int(n)
				}
			}
		case "depths":
			list, ok := v.([]any)
			if !ok {
				d.errorf(kl, "want a list of depths, such as [1, 4, 16, 64], not %s", typeName(v))
				continue
			}
			depths := make([]int, 0, len(list))
			for i, e := range list {
				n, ok := d.integer(kl.elem(i), e)
				read = read && ok
				depths = append(depths, int(max(min(n, math.MaxInt), math.MinInt)))
			}
			if read {
				p.Depths = depths
			}
		case "nr_requests":
			list, ok := v.([]any)
			if !ok {
				d.errorf(kl, "want a list of nr_requests values, such as [\"default\", 64], not %s", typeName(v))
				continue
			}
			nrs := make([]int, 0, len(list))
			for i, e := range list {
				var n int
				if s, isStr := e.(string); isStr {
					var err error
					if n, err = probeopt.ParseNrRequests(s); err != nil {
						d.errorf(kl.elem(i), "%v", err)
						read = false
					}
				} else {
					m, ok := d.integer(kl.elem(i), e)
					read = read && ok
					n = int(max(min(m, math.MaxInt), math.MinInt))
					if ok && n == probeopt.NrRequestsDefault {
						d.errorf(kl.elem(i), "0 is not an nr_requests: write \"default\" for the kernel's value")
						read = false
					}
				}
				nrs = append(nrs, n)
			}
			if read {
				p.NrRequests = nrs
			}
		case "block_size":
			n, err := parseBytes(v)
			if read = err == nil; err != nil {
				d.errorf(kl, "%v", err)
			} else {
				p.BlockSize = int(min(n, math.MaxInt)) // out of range either way
			}
		case "engine", "choose":
			s, ok := d.str(kl, v)
			if read = ok; ok && k == "engine" {
				p.Engine = s
			} else if ok {
				p.Choose = s
			}
		case "margin":
			s, ok := v.(string)
			if !ok {
				d.errorf(kl, "want a percentage as a string, such as \"5%%\", not %s", typeName(v))
				continue
			}
			f, err := ParseMargin(s)
			if read = err == nil; err != nil {
				d.errorf(kl, "%v", err)
			} else {
				p.Margin = f
			}
		case "max_age":
			if s, ok := d.str(kl, v); ok {
				if a, err := ParseMaxAge(s); err != nil {
					d.errorf(kl, "%v", err)
				} else {
					p.MaxAge = a
				}
			}
			continue
		default:
			d.unknownKey(kl, k, probeKeys, "[rule.probe]")
			continue
		}
		if read {
			given[k] = kl
			order = append(order, k)
		}
	}
	for _, pr := range p.Problems() {
		// A problem of two keys is reported at the later one given.
		var at *loc
		for _, k := range order {
			if kl, ok := given[k]; ok && slices.Contains(pr.Keys, k) {
				at = &kl
			}
		}
		switch {
		case at == nil:
			d.errorf(l, "%s", pr)
		case pr.Elem >= 0:
			d.errorf(at.elem(pr.Elem), "%s", pr.Msg)
		default:
			d.errorf(*at, "%s", pr.Msg)
		}
	}
	return &p
}

// daemonProbeKey reads one of the [daemon] probe keys; false when k is not
// one.
func (d *decoder) daemonProbeKey(kl loc, k string, v any, out *Daemon) bool {
	switch k {
	case "probe_concurrency":
		if n, ok := d.integer(kl, v); ok {
			if n < 1 || n > 64 {
				d.errorf(kl, "%d is outside 1..64 (probes of different disks at once)", n)
			} else {
				out.ProbeConcurrency = int(n)
			}
		}
	case "probe_budget":
		if s, ok := d.str(kl, v); ok {
			b, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(kl, "%q is not a duration: want a number with a unit, such as \"5m\", or \"0\" for no limit", s)
			case b < 0:
				d.errorf(kl, "%s is negative; \"0\" is no limit", s)
			default:
				out.ProbeBudget = b
			}
		}
	case "probe_results":
		globs, ok := d.stringList(kl, v)
		if !ok {
			return true
		}
		var good []string
		for i, g := range globs {
			el := kl
			if _, isList := v.([]any); isList {
				el = kl.elem(i)
			}
			switch _, err := filepath.Match(g, ""); {
			case err != nil:
				d.errorf(el, "%q is not a valid glob: %v", g, err)
			case !filepath.IsAbs(g):
				d.errorf(el, "%q is not an absolute path", g)
			default:
				good = append(good, g)
			}
		}
		if len(good) == len(globs) {
			out.ProbeResults = good
		}
	default:
		return false
	}
	return true
}
