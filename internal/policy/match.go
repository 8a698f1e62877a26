package policy

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// cond is one compiled match (or except) key. test says whether it holds
// for a disk and why, in words that fit after "key: ", whichever the
// outcome. A fact the kernel did not report never holds.
type cond struct {
	key  string // as reported: "model", "property.ID_BUS"
	from *matchKey
	test func(d *sysfs.Device) (bool, string)
}

type condParser func(d *decoder, l loc, v any) []cond

// conds compiles one match or except table, keys in matchKeys order, each
// cond pointing at its key's entry.
func (d *decoder) conds(l loc, m map[string]any) []cond {
	for _, k := range d.keys(l, m) {
		if lookupMatchKey(k) == nil {
			d.unknownKey(l.child(k), k, matchKeyNames(), "[rule.match] or [rule.except]")
		}
	}
	out := []cond{}
	keys := matchKeys()
	for i := range keys {
		mk := &keys[i]
		if v, ok := m[mk.name]; ok {
			for _, c := range mk.parse(d, l.child(mk.name), v) {
				c.from = mk
				out = append(out, c)
			}
		}
	}
	return out
}

// holds tests every cond: all hold, or the reasons of those that do not.
func holds(cs []cond, dev *sysfs.Device) (bool, []string) {
	var failed []string
	for _, c := range cs {
		if ok, why := c.test(dev); !ok {
			failed = append(failed, c.key+": "+why)
		}
	}
	return len(failed) == 0, failed
}

// explainAll describes every cond (used when they all hold).
func explainAll(cs []cond, dev *sysfs.Device) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		_, why := c.test(dev)
		out = append(out, c.key+": "+why)
	}
	return out
}

// elemLoc is where the i-th string of v is: its own element when v is a
// list, v itself when it is a single string.
func elemLoc(l loc, v any, i int) loc {
	if _, isList := v.([]any); isList {
		return l.elem(i)
	}
	return l
}

func listString(items []string) string { return "[" + strings.Join(items, " ") + "]" }

func classNames() []string {
	out := make([]string, len(sysfs.Classes))
	for i, c := range sysfs.Classes {
		out[i] = string(c)
	}
	return out
}

func parseClass(d *decoder, l loc, v any) []cond {
	list, ok := d.stringList(l, v)
	if !ok {
		return nil
	}
	for i, c := range list {
		if !sysfs.IsClass(c) {
			el := elemLoc(l, v, i)
			what := fmt.Sprintf("%q is not a class", c)
			if s, near := suggest(c, classNames()); near {
				d.errorf(el, "%s; did you mean %q? (classes: %s)", what, s, strings.Join(classNames(), ", "))
			} else {
				d.errorf(el, "%s (classes: %s)", what, strings.Join(classNames(), ", "))
			}
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return []cond{{key: "class", test: func(dev *sysfs.Device) (bool, string) {
		have := string(dev.Class)
		if have == "" {
			have = string(sysfs.ClassUnknown)
		}
		if contains(list, have) {
			return true, fmt.Sprintf("%s is in %s", have, listString(list))
		}
		return false, fmt.Sprintf("%s is not in %s", have, listString(list))
	}}}
}

func parseName(d *decoder, l loc, v any) []cond {
	list, ok := d.stringList(l, v)
	if !ok {
		return nil
	}
	for i, g := range list {
		el := elemLoc(l, v, i)
		if err := checkGlob(g); err != nil {
			d.errorf(el, "invalid glob %q: %v", g, err)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return []cond{{key: "name", test: func(dev *sysfs.Device) (bool, string) {
		for _, g := range list {
			if m, _ := path.Match(g, dev.Name); m {
				return true, fmt.Sprintf("%s matches %s", dev.Name, g)
			}
		}
		return false, fmt.Sprintf("%s matches none of %s", dev.Name, listString(list))
	}}}
}

// checkGlob rejects what path.Match would reject, and an empty pattern
// (which only matches an empty name, which no disk has).
func checkGlob(g string) error {
	if g == "" {
		return fmt.Errorf("empty")
	}
	if _, err := path.Match(g, ""); err != nil {
		return err
	}
	return nil
}

// stringsCond is an exact "any of" match on a string fact; an empty fact is
// unknown and never matches.
func stringsCond(key string, get func(*sysfs.Device) string, unknown string) condParser {
	return func(d *decoder, l loc, v any) []cond {
		list, ok := d.stringList(l, v)
		if !ok {
			return nil
		}
		for i, s := range list {
			if strings.TrimSpace(s) == "" {
				el := elemLoc(l, v, i)
				d.errorf(el, "empty name: it would match nothing")
				ok = false
			}
		}
		if !ok {
			return nil
		}
		return []cond{{key: key, test: func(dev *sysfs.Device) (bool, string) {
			have := get(dev)
			switch {
			case have == "":
				return false, "unknown (" + unknown + ")"
			case contains(list, have):
				return true, fmt.Sprintf("%s is in %s", have, listString(list))
			}
			return false, fmt.Sprintf("%s is not in %s", have, listString(list))
		}}}
	}
}

func boolCond(key string, get func(*sysfs.Device) (*bool, string)) condParser {
	return func(d *decoder, l loc, v any) []cond {
		want, ok := v.(bool)
		if !ok {
			d.errorf(l, "want true or false, not %s", typeName(v))
			return nil
		}
		return []cond{{key: key, test: func(dev *sysfs.Device) (bool, string) {
			have, unknown := get(dev)
			if have == nil {
				return false, unknownFact(dev, key, unknown)
			}
			if *have == want {
				return true, strconv.FormatBool(*have)
			}
			return false, fmt.Sprintf("%t, want %t", *have, want)
		}}}
	}
}

// bounds is an inclusive range; nil ends are open.
type bounds struct{ min, max *uint64 }

func (b bounds) test(have uint64, format func(uint64) string) (bool, string) {
	switch {
	case b.min != nil && b.max != nil && *b.min == *b.max:
		if have == *b.min {
			return true, format(have)
		}
		return false, fmt.Sprintf("%s is not %s", format(have), format(*b.min))
	case b.min != nil && have < *b.min:
		return false, fmt.Sprintf("%s is below %s", format(have), format(*b.min))
	case b.max != nil && have > *b.max:
		return false, fmt.Sprintf("%s is above %s", format(have), format(*b.max))
	}
	return true, fmt.Sprintf("%s is within %s", format(have), b.String(format))
}

func (b bounds) String(format func(uint64) string) string {
	lo, hi := "", ""
	if b.min != nil {
		lo = format(*b.min)
	}
	if b.max != nil {
		hi = format(*b.max)
	}
	return "[" + lo + ".." + hi + "]"
}

// rangeTable reads { min = ..., max = ... } (at least one), each end read
// by end.
func (d *decoder) rangeTable(l loc, m map[string]any, end func(loc, any) (uint64, bool)) (bounds, bool) {
	var b bounds
	ok := true
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		switch k {
		case "min", "max":
			n, good := end(kl, m[k])
			if !good {
				ok = false
				continue
			}
			if k == "min" {
				b.min = &n
			} else {
				b.max = &n
			}
		default:
			d.unknownKey(kl, k, []string{"min", "max"}, "")
			ok = false
		}
	}
	if !ok {
		return b, false
	}
	if b.min == nil && b.max == nil {
		d.errorf(l, "empty range: give min, max or both")
		return b, false
	}
	return b, true
}

func parseHWQueues(d *decoder, l loc, v any) []cond {
	count := func(l loc, v any) (uint64, bool) {
		n, ok := d.integer(l, v)
		if !ok {
			return 0, false
		}
		if n < 0 {
			d.errorf(l, "%d is negative", n)
			return 0, false
		}
		return uint64(n), true
	}
	var b bounds
	switch v := v.(type) {
	case map[string]any:
		var ok bool
		if b, ok = d.rangeTable(l, v, count); !ok {
			return nil
		}
	case int64:
		n, ok := count(l, v)
		if !ok {
			return nil
		}
		b = bounds{&n, &n}
	default:
		d.errorf(l, "want an integer or a range such as { min = 2 }, not %s", typeName(v))
		return nil
	}
	if b.min != nil && b.max != nil && *b.min > *b.max {
		d.errorf(l, "min %d is above max %d", *b.min, *b.max)
		return nil
	}
	itoa := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return []cond{{key: "hw_queues", test: func(dev *sysfs.Device) (bool, string) {
		// 0 is a fact too: a bio-based disk has no hardware queues.
		if dev.HWQueues == nil {
			return false, unknownFact(dev, "hw_queues", "not read")
		}
		return b.test(uint64(max(*dev.HWQueues, 0)), itoa)
	}}}
}

func parseSize(d *decoder, l loc, v any) []cond {
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(l, `want a range such as { min = "1GiB", max = "64TiB" }, not %s`, typeName(v))
		return nil
	}
	end := func(l loc, v any) (uint64, bool) {
		n, err := parseBytes(v)
		if err != nil {
			d.errorf(l, "%v", err)
			return 0, false
		}
		return n, true
	}
	b, ok := d.rangeTable(l, m, end)
	if !ok {
		return nil
	}
	if b.min != nil && b.max != nil && *b.min > *b.max {
		d.errorf(l, "min %s is above max %s", formatBytes(*b.min), formatBytes(*b.max))
		return nil
	}
	return []cond{{key: "size", test: func(dev *sysfs.Device) (bool, string) {
		if dev.SizeBytes == nil {
			return false, unknownFact(dev, "size", "not reported by the kernel")
		}
		return b.test(*dev.SizeBytes, formatBytes)
	}}}
}

// regexpCond matches a string fact against regular expressions (RE2,
// unanchored: write ^...$ to match the whole value); any one matching is
// enough. An empty fact is unknown and never matches.
func regexpCond(key string, get func(*sysfs.Device) string) condParser {
	return func(d *decoder, l loc, v any) []cond {
		list, ok := d.stringList(l, v)
		if !ok {
			return nil
		}
		res := make([]*regexp.Regexp, 0, len(list))
		for i, s := range list {
			re, err := regexp.Compile(s)
			if err != nil {
				el := elemLoc(l, v, i)
				d.errorf(el, "invalid regular expression %q: %v", s, err)
				ok = false
				continue
			}
			res = append(res, re)
		}
		if !ok {
			return nil
		}
		return []cond{{key: key, test: func(dev *sysfs.Device) (bool, string) {
			have := get(dev)
			if have == "" {
				return false, "unknown (not reported by the kernel)"
			}
			for _, re := range res {
				if re.MatchString(have) {
					return true, fmt.Sprintf("%q matches %q", have, re.String())
				}
			}
			if len(res) == 1 {
				return false, fmt.Sprintf("%q does not match %q", have, res[0].String())
			}
			quoted := make([]string, len(res))
			for i, re := range res {
				quoted[i] = strconv.Quote(re.String())
			}
			return false, fmt.Sprintf("%q matches none of %s", have, listString(quoted))
		}}}
	}
}

// parseProperty reads a table of udev property name -> glob (or list of
// globs). Properties are known only when the caller has them (udev mode);
// otherwise every property key fails as unknown.
func parseProperty(d *decoder, l loc, v any) []cond {
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(l, `want a table of udev properties such as { ID_BUS = "ata" }, not %s`, typeName(v))
		return nil
	}
	if len(m) == 0 {
		d.errorf(l, "empty table: name at least one udev property")
		return nil
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []cond
	for _, name := range names {
		kl := l.child(name)
		if !validPropertyName(name) {
			d.errorf(kl, "%q is not a udev property name (letters, digits, '_' and '.')", name)
			continue
		}
		globs, ok := d.stringList(kl, m[name])
		if !ok {
			continue
		}
		for i, g := range globs {
			if _, err := path.Match(g, ""); err != nil {
				el := elemLoc(kl, m[name], i)
				d.errorf(el, "invalid glob %q: %v", g, err)
				ok = false
			}
		}
		if !ok {
			continue
		}
		out = append(out, cond{key: "property." + name, test: func(dev *sysfs.Device) (bool, string) {
			if dev.Properties == nil {
				return false, "unknown (no udev properties for this disk: they come with uevent_source = \"udev\")"
			}
			have, set := dev.Properties[name]
			if !set {
				return false, "not set"
			}
			for _, g := range globs {
				if m, _ := path.Match(g, have); m {
					return true, fmt.Sprintf("%q matches %q", have, g)
				}
			}
			return false, fmt.Sprintf("%q matches none of %s", have, listString(globs))
		}})
	}
	return out
}

func validPropertyName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// unknownFact words an unknown fact: the file that was missing when the read
// found none (a copied tree often lacks files the kernel has), else why.
func unknownFact(dev *sysfs.Device, key, why string) string {
	if file, ok := dev.Missing[key]; ok {
		return "unknown (" + file + " is missing)"
	}
	return "unknown (" + why + ")"
}
