package policy

import (
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// knownSchedulers are the elevators in mainline Linux; legacySchedulers are
// the single-queue ones removed in 5.0 with the legacy block layer, which
// old guides still name.
var (
	knownSchedulers  = []string{"none", "mq-deadline", "kyber", "bfq"}
	legacySchedulers = map[string]string{"deadline": "mq-deadline", "noop": "none", "cfq": "bfq"}
)

// knownParams are the queue/iosched/ files of mainline schedulers
// (sysfs.Attributes). Other names are allowed (kernels add parameters;
// out-of-tree schedulers exist), but one a typo away from these is refused
// with a suggestion.
func knownParams() []string {
	var all []string
	for _, spec := range sysfs.Attributes() {
		if spec.Kind == sysfs.KindParam {
			all = append(all, spec.Attr.Param())
		}
	}
	sort.Strings(all)
	return all
}

func knownParam(s string) bool {
	_, ok := sysfs.ParamAttr(s).Spec()
	return ok
}

// paramRe is what a queue/iosched/ file name may be: one path element, so
// nothing can be smuggled in ("../scheduler", "/etc/x").
var paramRe = regexp.MustCompile(`^[a-z0-9_]+$`)

// setKeys are the keys of [rule.set]: the scheduler and the tunables
// sysfs.Attributes allows, in its order, and the iosched table.
func setKeys() []string {
	var keys []string
	for _, spec := range sysfs.Attributes() {
		if spec.Kind != sysfs.KindParam && spec.Refused == "" {
			keys = append(keys, string(spec.Attr))
		}
	}
	return append(keys, "iosched")
}

// settings reads [rule.set] into settings in a fixed order.
func (d *decoder) settings(l loc, m map[string]any, r *Rule) []Setting {
	var out []Setting
	add := func(attr string, values ...string) {
		out = append(out, Setting{Attribute: attr, Values: values})
	}
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		v := m[k]
		switch {
		case k == "scheduler":
			if names, ok := d.schedulers(kl, v); ok {
				add("scheduler", names...)
			}
		case k == "iosched":
			t, ok := d.table(kl, v, "[rule.set.iosched]")
			if !ok {
				continue
			}
			for _, p := range d.keys(kl, t) {
				if n, ok := d.param(kl.child(p), p, t[p]); ok {
					add(string(sysfs.ParamAttr(p)), strconv.FormatInt(n, 10))
				}
			}
		case sysfs.Attr(k).Kind() == sysfs.KindTunable:
			if n, ok := d.tunable(kl, sysfs.Attr(k), v); ok {
				add(k, strconv.FormatInt(n, 10))
			}
		default:
			d.unknownKey(kl, k, setKeys(), "[rule.set]")
		}
	}
	// Parameters with nothing but none to apply to, or that none of the
	// rule's own schedulers has, are a contradiction within one rule
	// (across rules, plan reports them as skipped).
	if _, hasParams := m["iosched"]; hasParams && onlyNone(m["scheduler"]) {
		d.errorf(l.child("iosched"), "scheduler none has no parameters")
	} else if t, ok := m["iosched"].(map[string]any); ok {
		scheds := schedulerNames(m["scheduler"])
		for _, p := range d.keys(l.child("iosched"), t) {
			if len(scheds) > 0 && !slices.ContainsFunc(scheds, func(s string) bool { return sysfs.HasParam(s, p) }) {
				d.errorf(l.child("iosched").child(p), "%s is not a parameter of %s", p, strings.Join(scheds, " or "))
			}
		}
	}
	for i := range out {
		out[i].Rule = r.Name
	}
	sortSettings(out)
	return out
}

// schedulerNames are the names a scheduler value lists (nil when absent or
// malformed: its own error is reported elsewhere).
func schedulerNames(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var names []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				names = append(names, s)
			}
		}
		return names
	}
	return nil
}

// onlyNone reports whether a scheduler value offers nothing but none.
func onlyNone(v any) bool {
	switch v := v.(type) {
	case string:
		return v == "none"
	case []any:
		for _, e := range v {
			if e != "none" {
				return false
			}
		}
		return len(v) > 0
	}
	return false
}

func (d *decoder) schedulers(l loc, v any) ([]string, bool) {
	names, ok := d.stringList(l, v)
	if !ok {
		return nil, false
	}
	seen := map[string]bool{}
	for i, n := range names {
		el := elemLoc(l, v, i)
		switch {
		case !sysfs.ValidSchedulerName(n):
			d.errorf(el, "%q is not a plausible scheduler name (lower-case letters, digits, '-' and '_', at most 15 characters)", n)
			ok = false
		case legacySchedulers[n] != "":
			d.errorf(el, "%q was removed in Linux 5.0 with the legacy block layer; use %q", n, legacySchedulers[n])
			ok = false
		case seen[n]:
			d.errorf(el, "%q is listed twice", n)
			ok = false
		case !contains(knownSchedulers, n):
			if s, near := suggest(n, knownSchedulers); near {
				d.errorf(el, "%q is not a kernel scheduler; did you mean %q?", n, s)
				ok = false
			}
		}
		seen[n] = true
	}
	return names, ok
}

// tunable reads the value of a tunable of sysfs.Attributes: an integer in
// its range, unless the tunable is refused.
func (d *decoder) tunable(l loc, a sysfs.Attr, v any) (int64, bool) {
	spec, _ := a.Spec()
	if spec.Refused != "" {
		d.errorf(l, "%s cannot be set: %s", a, spec.Refused)
		return 0, false
	}
	n, ok := d.integer(l, v)
	if !ok {
		return 0, false
	}
	r := spec.Range
	why := ""
	if r.Why != "" {
		why = ": " + r.Why
	}
	if n < r.Min || n > r.Max {
		d.errorf(l, "%d is out of range %d..%d%s", n, r.Min, r.Max, why)
		return 0, false
	}
	if r.Multiple > 1 && n%r.Multiple != 0 {
		d.errorf(l, "%d is not a multiple of %d%s", n, r.Multiple, why)
		return 0, false
	}
	return n, true
}

// param reads the value of the scheduler parameter name: a non-negative
// integer, within the range sysfs.Attributes gives a mainline one.
func (d *decoder) param(l loc, name string, v any) (int64, bool) {
	spec, known := sysfs.ParamAttr(name).Spec()
	ok := true
	switch {
	case !paramRe.MatchString(name):
		d.errorf(l, "%q is not a scheduler parameter name (lower-case letters, digits and '_')", name)
		ok = false
	case sysfs.Attr(name).Kind() == sysfs.KindTunable || sysfs.Attr(name).Kind() == sysfs.KindScheduler:
		d.errorf(l, "%q is a queue setting, not a scheduler parameter: it belongs in [rule.set]", name)
		ok = false
	case !known:
		if s, near := suggest(name, knownParams()); near {
			d.errorf(l, "unknown scheduler parameter; did you mean %q?", s)
			ok = false
		}
	}
	n, isInt := v.(int64)
	switch {
	case !isInt:
		d.errorf(l, "want an integer, not %s", typeName(v))
		ok = false
	case n < 0:
		d.errorf(l, "%d is negative: no scheduler parameter takes a negative value", n)
		ok = false
	case known && (n < spec.Range.Min || n > spec.Range.Max):
		d.errorf(l, "%d is out of range %d..%d", n, spec.Range.Min, spec.Range.Max)
		ok = false
	}
	return n, ok
}

func sortSettings(s []Setting) {
	sysfs.SortByWriteOrder(s, func(s Setting) string { return s.Attribute })
}
