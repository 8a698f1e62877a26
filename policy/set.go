package policy

import (
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/iosched/iosched/sysfs"
)

// tunableRange is what the kernel accepts for a queue/ file and reads back
// unchanged. A value the kernel would clamp or round (nr_requests below 4,
// read_ahead_kb not a whole page) or that means "reset to the default"
// (wbt_lat_usec -1, max_sectors_kb 0) is refused: iosched compares what it
// reads with what the policy says, and such a value would never compare
// equal, so every plan and every reconcile would write it again.
type tunableRange struct {
	min, max int64
	multiple int64
	why      string
}

// uintMax is the largest value queue_var_store accepts (block/blk-sysfs.c:
// kstrtoul, then v > UINT_MAX is -EINVAL).
const uintMax = math.MaxUint32

var tunableRanges = map[string]tunableRange{
	// ra_pages = ra_kb >> (PAGE_SHIFT - 10): the value reads back rounded
	// down to whole pages; 4 KiB is the smallest page size.
	"read_ahead_kb": {min: 0, max: uintMax, multiple: 4, why: "the kernel keeps whole 4 KiB pages"},
	// queue_requests_store raises anything below BLKDEV_MIN_RQ (4) to 4.
	"nr_requests": {min: 4, max: uintMax, why: "the kernel raises smaller values to 4 (BLKDEV_MIN_RQ)"},
	"nomerges":    {min: 0, max: 2},
	"rq_affinity": {min: 0, max: 2},
	"add_random":  {min: 0, max: 1},
	"iostats":     {min: 0, max: 1},
	// queue_wb_lat_store: -1 restores the default, which then reads back as
	// its value; below -1 is -EINVAL. The value is multiplied by 1000 in
	// an s64.
	"wbt_lat_usec": {min: 0, max: math.MaxInt64 / 1000, why: "-1 (restore the default) reads back as the default's value, so iosched could never see it in place: write the value itself"},
	// queue_max_sectors_store: 0 restores the default (same problem), below
	// one page is -EINVAL.
	"max_sectors_kb": {min: 4, max: uintMax, why: "0 (restore the default) reads back as the default's value, and less than one page is refused by the kernel"},
	// queue_io_timeout_store: kstrtou32, 0 is -EINVAL. In milliseconds.
	"io_timeout": {min: 1, max: uintMax, why: "milliseconds; the kernel refuses 0"},
}

// knownSchedulers are the elevators in mainline Linux; legacySchedulers are
// the single-queue ones removed in 5.0 with the legacy block layer, which
// old guides still name.
var (
	knownSchedulers  = []string{"none", "mq-deadline", "kyber", "bfq"}
	legacySchedulers = map[string]string{"deadline": "mq-deadline", "noop": "none", "cfq": "bfq"}
)

// knownParams are the queue/iosched/ files of mainline schedulers
// (sysfs.SchedulerParams). Other names are allowed (kernels add parameters;
// out-of-tree schedulers exist), but one a typo away from these is refused
// with a suggestion.
var knownParams = func() []string {
	var all []string
	for _, params := range sysfs.SchedulerParams {
		all = append(all, params...)
	}
	sort.Strings(all)
	return all
}()

func knownParam(s string) bool { return contains(knownParams, s) }

// paramRe is what a queue/iosched/ file name may be: one path element, so
// nothing can be smuggled in ("../scheduler", "/etc/x").
var paramRe = regexp.MustCompile(`^[a-z0-9_]+$`)

func setKeys() []string {
	return append(append([]string{"scheduler"}, sysfs.Tunables...), "iosched")
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
					add("iosched/"+p, strconv.FormatInt(n, 10))
				}
			}
		case sysfs.IsTunable(k):
			if n, ok := d.tunable(kl, k, v); ok {
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

func (d *decoder) tunable(l loc, name string, v any) (int64, bool) {
	n, ok := d.integer(l, v)
	if !ok {
		return 0, false
	}
	r, known := tunableRanges[name]
	if !known {
		// A tunable sysfs knows and this table does not yet: what
		// queue_var_store accepts.
		r = tunableRange{min: 0, max: uintMax}
	}
	why := ""
	if r.why != "" {
		why = ": " + r.why
	}
	if n < r.min || n > r.max {
		d.errorf(l, "%d is out of range %d..%d%s", n, r.min, r.max, why)
		return 0, false
	}
	if r.multiple > 1 && n%r.multiple != 0 {
		d.errorf(l, "%d is not a multiple of %d%s", n, r.multiple, why)
		return 0, false
	}
	return n, true
}

func (d *decoder) param(l loc, name string, v any) (int64, bool) {
	ok := true
	switch {
	case !paramRe.MatchString(name):
		d.errorf(l, "%q is not a scheduler parameter name (lower-case letters, digits and '_')", name)
		ok = false
	case sysfs.IsTunable(name) || name == "scheduler":
		d.errorf(l, "%q is a queue setting, not a scheduler parameter: it belongs in [rule.set]", name)
		ok = false
	case !knownParam(name):
		if s, near := suggest(name, knownParams); near {
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
	case n > math.MaxInt32 && knownParam(name) && !strings.HasSuffix(name, "_lat_nsec"):
		// mq-deadline and bfq parse their parameters with kstrtoint
		// (EINVAL above INT_MAX); kyber's *_lat_nsec are u64.
		d.errorf(l, "%d is out of range 0..%d", n, math.MaxInt32)
		ok = false
	}
	return n, ok
}

func sortSettings(s []Setting) {
	sort.SliceStable(s, func(i, j int) bool {
		ri, rj := sysfs.WriteRank(s[i].Attribute), sysfs.WriteRank(s[j].Attribute)
		if ri != rj {
			return ri < rj
		}
		return s[i].Attribute < s[j].Attribute
	})
}
