package policy

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/iosched/iosched/internal/sysfs"
)

// File is one policy source: its name (a path, or "<embedded>") and text.
type File struct {
	Name string
	Data []byte
}

// EmbeddedName is the source name of the built-in default policy.
const EmbeddedName = "<embedded>"

// DefaultReconcileInterval is [daemon] reconcile_interval when a policy does
// not set it. A reconcile only reads (about 20 small sysfs files a disk;
// contrib/bench/README.md has what 1000 disks take) and writes nothing when
// nothing drifted, so a minute costs next to nothing, and it bounds how long a setting rewritten
// behind iosched's back (a udev rule or tuned racing with iosched on hot-plug,
// an admin's echo) stays wrong.
const DefaultReconcileInterval = 60 * time.Second

// minReconcileInterval keeps a typo ("60ms" for "60s") from turning the
// daemon into a busy loop.
const minReconcileInterval = 100 * time.Millisecond

// Parse reads files as one policy: their rules in order, [daemon] keys of a
// later file overriding an earlier one's. Every problem in every file is
// reported; the error is then a *Errors.
func Parse(files ...File) (*Policy, error) {
	p := &Policy{
		Sources: []string{},
		Rules:   []*Rule{},
		Daemon:  Daemon{UeventSource: "kernel", ReconcileInterval: DefaultReconcileInterval, ProbeConcurrency: DefaultProbeConcurrency},
	}
	names := map[string]*Rule{}
	errs := make([]Errors, len(files)) // by file
	fileOf := map[*Rule]int{}
	for i, f := range files {
		p.Sources = append(p.Sources, f.Name)
		d := &decoder{file: f.Name}
		n := len(p.Rules)
		d.parseFile(f.Data, p, names)
		for _, r := range p.Rules[n:] {
			fileOf[r] = i
		}
		errs[i] = d.errs
	}
	adaptSources(p, errs, fileOf)
	var all Errors
	for _, es := range errs {
		sortByPosition(es)
		all = append(all, es...)
	}
	if len(all) > 0 {
		return nil, &all
	}
	return p, nil
}

// Rule returns the rule named name, or nil.
func (p *Policy) Rule(name string) *Rule {
	for _, r := range p.Rules {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// decoder validates one file's decoded TOML by hand, so that each problem
// can name its key and position and every problem is found.
type decoder struct {
	file string
	idx  posIndex
	errs Errors
	// inRule is the label of the rule being read, for errors.
	inRule string
}

// loc is a value's address: path finds its position, key names it in
// messages.
type loc struct {
	path []string
	key  string
}

func (l loc) child(name string) loc {
	k := toml.Key{name}.String()
	if l.key != "" {
		k = l.key + "." + k
	}
	return loc{path: append(append([]string{}, l.path...), name), key: k}
}

// elem is the i-th element of an array: its own position, the array's key.
func (l loc) elem(i int) loc {
	return loc{path: append(append([]string{}, l.path...), indexElem(i)), key: l.key}
}

func (d *decoder) errorf(l loc, format string, a ...any) {
	e := d.at(l)
	e.Msg = fmt.Sprintf(format, a...)
	d.errs = append(d.errs, e)
}

// at is an error at l without its message: the nearest enclosing thing
// with a known position.
func (d *decoder) at(l loc) *Error {
	e := &Error{File: d.file, Rule: d.inRule, Key: l.key}
	for n := len(l.path); n > 0; n-- {
		if p, ok := d.idx[pathKey(l.path[:n])]; ok {
			e.Line, e.Col = p.Line, p.Col
			break
		}
	}
	return e
}

// keys returns m's keys in the order they appear in the file.
func (d *decoder) keys(l loc, m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	at := func(k string) pos { return d.idx[pathKey(l.child(k).path)] }
	sort.Slice(ks, func(i, j int) bool {
		a, b := at(ks[i]), at(ks[j])
		if a != b {
			return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
		}
		return ks[i] < ks[j]
	})
	return ks
}

func (d *decoder) parseFile(data []byte, p *Policy, names map[string]*Rule) {
	// A byte-order mark (editors on other systems write one) is not TOML
	// and would shift every position the scanner finds.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		e := &Error{File: d.file, Msg: err.Error()}
		var pe toml.ParseError
		if errors.As(err, &pe) {
			e.Line, e.Col = pe.Position.Line, pe.Position.Col
			// One error, one line: the library may quote a newline.
			e.Msg = strings.ReplaceAll(pe.Message, "\n", `\n`)
			// The library's line is one too far when the error is at a
			// newline it had consumed; the byte offset is exact.
			if st := pe.Position.Start; st > 0 && st <= len(data) {
				e.Line, e.Col = lineCol(data, st)
			}
		}
		d.errs = append(d.errs, e)
		return
	}
	d.idx = positions(data)
	top := loc{}
	for _, k := range d.keys(top, m) {
		l := top.child(k)
		switch k {
		case "rule":
			d.rules(l, m[k], p, names)
		case "daemon":
			d.daemon(l, m[k], &p.Daemon)
		default:
			d.unknownKey(l, k, topKeys, "")
		}
	}
}

var topKeys = []string{"rule", "daemon"}

// unknownKey reports a key that is not one of valid: a key from another
// table says where it belongs, a near miss gets a suggestion.
func (d *decoder) unknownKey(l loc, k string, valid []string, here string) {
	if where := belongsIn(k); where != "" && where != here {
		d.errorf(l, "unknown key here: %q belongs in %s", k, where)
		return
	}
	d.errorf(l, "%s", unknownMsg("unknown key", k, valid))
}

// belongsIn names the table where key k is valid.
func belongsIn(k string) string {
	switch {
	case contains(ruleKeys, k):
		return "[[rule]]"
	case lookupMatchKey(k) != nil:
		return "[rule.match] or [rule.except]"
	case k == "iosched" || sysfs.Attr(k).Kind() == sysfs.KindScheduler || sysfs.Attr(k).Kind() == sysfs.KindTunable:
		return "[rule.set]"
	case knownParam(k):
		return "[rule.set.iosched]"
	case contains(daemonKeys, k):
		return "[daemon]"
	case contains(probeKeys, k) && contains(adaptKeys, k):
		return "[rule.probe] or [rule.adapt]"
	case contains(probeKeys, k):
		return "[rule.probe]"
	case contains(adaptKeys, k):
		return "[rule.adapt]"
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ruleKeys are the keys of a [[rule]] table; [rule.probe] is in probe.go,
// [rule.adapt] in adapt.go.
var ruleKeys = []string{"name", "match", "except", "set", "probe", "adapt", "observe"}

func (d *decoder) rules(l loc, v any, p *Policy, names map[string]*Rule) {
	var tables []map[string]any
	switch v := v.(type) {
	case []map[string]any:
		tables = v
	case []any:
		for i, e := range v {
			t, ok := e.(map[string]any)
			if !ok {
				d.errorf(l.elem(i), "want a table for each rule ([[rule]]), not %s", typeName(e))
				continue
			}
			tables = append(tables, t)
		}
	case map[string]any:
		d.errorf(l, "each rule starts with [[rule]] (an array of tables), not [rule]")
		return
	default:
		d.errorf(l, "want [[rule]] tables, not %s", typeName(v))
		return
	}
	for i, t := range tables {
		rl := l.elem(i)
		rl.key = ""
		r := d.rule(rl, t, len(p.Rules)+1, names)
		p.Rules = append(p.Rules, r)
	}
	d.inRule = ""
}

// rule reads one [[rule]] table, the index-th rule of the policy.
func (d *decoder) rule(l loc, t map[string]any, index int, names map[string]*Rule) *Rule {
	r := &Rule{Index: index}
	at := d.idx[pathKey(l.path)]
	r.Source = d.file
	if at.Line > 0 {
		r.Source = fmt.Sprintf("%s:%d", d.file, at.Line)
	}
	// The name first, so every error in the rule can carry it.
	d.inRule = ruleLabel(index, "")
	if v, ok := t["name"]; ok {
		if name, ok := d.ruleName(l.child("name"), v); ok {
			r.Name = name
			d.inRule = ruleLabel(index, name)
			if prev, dup := names[name]; dup {
				d.errorf(l.child("name"), "%q is already the name of %s (%s)", name, ruleLabel(prev.Index, prev.Name), prev.Source)
			} else {
				names[name] = r
			}
		}
	} else {
		d.errorf(loc{path: l.path, key: "name"}, "missing: every rule needs a unique name")
	}
	for _, k := range d.keys(l, t) {
		kl := l.child(k)
		switch k {
		case "name":
		case "match":
			if m, ok := d.table(kl, t[k], "[rule.match]"); ok {
				r.match = d.conds(kl, m)
			}
		case "except":
			r.except = d.except(kl, t[k])
		case "set":
			if m, ok := d.table(kl, t[k], "[rule.set]"); ok {
				r.settings = d.settings(kl, m, r)
			}
		case "probe":
			r.probe = d.probeTable(kl, t[k])
		case "adapt":
			r.adapt, r.adaptAt = d.adaptTable(kl, t[k]), d.at(kl)
		case "observe":
			r.observe = d.observeKey(kl, t[k])
		default:
			d.unknownKey(kl, k, ruleKeys, "[[rule]]")
		}
	}
	return r
}

func (d *decoder) ruleName(l loc, v any) (string, bool) {
	s, ok := v.(string)
	switch {
	case !ok:
		d.errorf(l, "want a string, not %s", typeName(v))
	case strings.TrimSpace(s) == "":
		d.errorf(l, "must not be empty")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		d.errorf(l, "must not contain control characters (%q)", s)
	default:
		return s, true
	}
	return "", false
}

// except is one table (the rule does not apply when all its keys hold) or an
// array of them, [[rule.except]] (the rule does not apply when any one of
// them holds entirely).
func (d *decoder) except(l loc, v any) [][]cond {
	switch v := v.(type) {
	case map[string]any:
		return [][]cond{d.conds(l, v)}
	case []map[string]any:
		var out [][]cond
		for i, m := range v {
			out = append(out, d.conds(l.elem(i), m))
		}
		return out
	case []any:
		var out [][]cond
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				d.errorf(l.elem(i), "want a table ([[rule.except]]), not %s", typeName(e))
				continue
			}
			out = append(out, d.conds(l.elem(i), m))
		}
		return out
	}
	d.errorf(l, "want a table ([rule.except]) or tables ([[rule.except]]), not %s", typeName(v))
	return nil
}

// table asserts v is a table.
func (d *decoder) table(l loc, v any, header string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(l, "want a table (%s), not %s", header, typeName(v))
	}
	return m, ok
}

var daemonKeys = []string{"uevent_source", "reconcile_interval", "restore_on_exit", "metrics_file", "probe_concurrency", "probe_budget", "probe_results"}

func (d *decoder) daemon(l loc, v any, out *Daemon) {
	m, ok := d.table(l, v, "[daemon]")
	if !ok {
		return
	}
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		v := m[k]
		switch k {
		case "uevent_source":
			s, ok := d.str(kl, v)
			if !ok {
				continue
			}
			if s != "kernel" && s != "udev" {
				d.errorf(kl, `%q is not a uevent source: "kernel" (kernel uevents, no udevd needed) or "udev" (udevd's events, with udev properties)`, s)
				continue
			}
			out.UeventSource = s
		case "reconcile_interval":
			s, ok := d.str(kl, v)
			if !ok {
				continue
			}
			iv, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(kl, `%q is not a duration: want a number with a unit, such as "60s" or "5m", or "0" to turn reconciling off`, s)
			case iv < 0:
				d.errorf(kl, "%s is negative; \"0\" turns reconciling off", s)
			case iv > 0 && iv < minReconcileInterval:
				d.errorf(kl, "%s is shorter than %s, the shortest interval (\"0\" turns reconciling off)", s, minReconcileInterval)
			default:
				out.ReconcileInterval = iv
			}
		case "restore_on_exit":
			if b, ok := v.(bool); ok {
				out.RestoreOnExit = b
			} else {
				d.errorf(kl, "want true or false, not %s", typeName(v))
			}
		case "metrics_file":
			if s, ok := d.str(kl, v); ok && d.metricsFile(kl, s) {
				out.MetricsFile = s
			}
		default:
			if !d.daemonProbeKey(kl, k, v, out) {
				d.unknownKey(kl, k, daemonKeys, "[daemon]")
			}
		}
	}
}

// metricsFile checks [daemon] metrics_file: "" (off), or a clean absolute
// path to a file named *.prom, the only files node_exporter's textfile
// collector reads (collector/textfile.go).
func (d *decoder) metricsFile(l loc, s string) bool {
	switch {
	case s == "":
		return true
	case strings.ContainsRune(s, 0):
		d.errorf(l, "%q contains a NUL byte", s)
	case !filepath.IsAbs(s):
		d.errorf(l, "%q is not an absolute path: the daemon's working directory is /", s)
	case filepath.Clean(s) != s:
		d.errorf(l, "%q is not a clean path: write %q", s, filepath.Clean(s))
	case filepath.Ext(s) != ".prom":
		d.errorf(l, "%q does not end in .prom: node_exporter's textfile collector reads only *.prom files", s)
	default:
		return true
	}
	return false
}

// str asserts v is a string.
func (d *decoder) str(l loc, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.errorf(l, "want a string, not %s", typeName(v))
	}
	return s, ok
}

// stringList reads a string or an array of strings ("any of"); an empty array
// is an error since it could never match.
func (d *decoder) stringList(l loc, v any) ([]string, bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []any:
		if len(v) == 0 {
			d.errorf(l, "empty list: it would match nothing")
			return nil, false
		}
		out := make([]string, 0, len(v))
		ok := true
		for i, e := range v {
			s, isStr := e.(string)
			if !isStr {
				d.errorf(l.elem(i), "want a string, not %s", typeName(e))
				ok = false
				continue
			}
			out = append(out, s)
		}
		return out, ok
	}
	d.errorf(l, "want a string or a list of strings, not %s", typeName(v))
	return nil, false
}

// integer asserts v is an integer.
func (d *decoder) integer(l loc, v any) (int64, bool) {
	n, ok := v.(int64)
	if !ok {
		d.errorf(l, "want an integer, not %s", typeName(v))
	}
	return n, ok
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("%T", v)
}
