package conflicts

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// Kinds of writer.
const (
	UdevRule     = "udev rule"
	TunedProfile = "tuned profile"
)

// Set is every queue attribute assignment found under a root: the udev
// rules udevd would read and the active tuned profile. Make one with Load.
type Set struct {
	root  string
	udev  []*udevFile
	tuned *tunedConfig
	// Problems are files that could not be read or lines udevd would
	// reject: the set is what could be read.
	Problems []string
}

// Load reads the udev rules and the active tuned profile under root
// (default "/"). Only rules and profile units that write a queue attribute
// are kept, so the set is small whatever the machine has.
func Load(root string) (*Set, error) {
	if root == "" {
		root = "/"
	}
	s := &Set{root: root}
	paths, problems := listUdevRules(root)
	s.Problems = append(s.Problems, problems...)
	budget := int64(maxRulesTotal)
	for _, p := range paths {
		f, problems, err := readUdevFile(root, p, &budget)
		if err != nil {
			s.Problems = append(s.Problems, err.Error())
			if budget < 0 {
				break
			}
			continue
		}
		s.Problems = append(s.Problems, problems...)
		if f.writes() {
			s.udev = append(s.udev, f)
		}
	}
	tuned, problems, err := loadTuned(root)
	if err != nil {
		s.Problems = append(s.Problems, err.Error())
	}
	s.Problems = append(s.Problems, problems...)
	s.tuned = tuned
	return s, nil
}

// writes reports whether any rule of f writes a queue attribute.
func (f *udevFile) writes() bool {
	for _, r := range f.rules {
		if len(r.writes) > 0 {
			return true
		}
	}
	return false
}

// Empty reports whether nothing found writes a queue attribute.
func (s *Set) Empty() bool { return s == nil || len(s.udev) == 0 && s.tuned.empty() }

// Write is one assignment of a queue attribute that could apply to a disk.
type Write struct {
	Kind string // UdevRule or TunedProfile
	// Profile is the active tuned profile's name(s).
	Profile string `json:",omitempty"`
	// File is as on the system (not under the root it was read from);
	// Line is the line the assignment is written on.
	File string
	Line int
	// RuleLine is the line udevd names the rule by in its log (the last
	// of a rule continued over several lines).
	RuleLine int `json:",omitempty"`
	// Attribute is named as the policy names it (scheduler,
	// read_ahead_kb, iosched/fifo_batch).
	Attribute string
	Value     string
	// Compare is '>' (tuned writes Value only over a lower value), '<'
	// (only over a higher one), '*' (tuned multiplies the value by it),
	// or 0 (it writes Value).
	Compare byte `json:",omitempty"`
	// Actions are the uevent actions on which a udev rule writes.
	Actions []string `json:",omitempty"`
	// Unknown are the conditions that could not be decided for the disk:
	// the assignment applies if they hold.
	Unknown []string `json:",omitempty"`
}

// Where is the file and line, "FILE:LINE".
func (w Write) Where() string { return w.File + ":" + strconv.Itoa(w.Line) }

// Overrides reports whether the write would leave the attribute at another
// value than want.
func (w Write) Overrides(want string) bool {
	want = strings.TrimSpace(want)
	switch w.Compare {
	case '*':
		return strings.TrimSpace(w.Value) != "1"
	case '>', '<':
		a, err1 := strconv.ParseFloat(want, 64)
		b, err2 := strconv.ParseFloat(w.Value, 64)
		if err1 != nil || err2 != nil {
			return true
		}
		if w.Compare == '>' {
			return a < b
		}
		return a > b
	}
	return w.Value != want
}

// Describe words the write, without the disk: `udev rule
// /etc/udev/rules.d/60-x.rules:3 sets scheduler to "bfq" on add and change
// events`.
func (w Write) Describe() string {
	var b strings.Builder
	switch w.Kind {
	case TunedProfile:
		fmt.Fprintf(&b, "tuned profile %q (%s) sets %s ", w.Profile, w.Where(), w.Attribute)
		switch w.Compare {
		case '>':
			fmt.Fprintf(&b, "to %s when it is lower", w.Value)
		case '<':
			fmt.Fprintf(&b, "to %s when it is higher", w.Value)
		case '*':
			fmt.Fprintf(&b, "to %s times its value", w.Value)
		default:
			fmt.Fprintf(&b, "to %q", w.Value)
		}
	default:
		fmt.Fprintf(&b, "udev rule %s sets %s to %q on %s events", w.Where(), w.Attribute, w.Value, strings.Join(w.Actions, " and "))
	}
	if len(w.Unknown) > 0 {
		fmt.Fprintf(&b, " if %s (not known here)", strings.Join(w.Unknown, ", "))
	}
	return b.String()
}

// Known is what For may learn of a disk beyond its snapshot.
type Known struct {
	// Attr reads an attribute below the disk's sysfs directory, as
	// udevd's ATTR{} and tuned's device filters do (rel as a rule writes
	// it: "queue/rotational"); present is false when the file does not
	// exist. An error means the value cannot be told here. nil: only the
	// snapshot is known.
	Attr func(rel string) (value string, present bool, err error)
	// Written are the attributes the policy sets on the disk, as the
	// policy names them (scheduler, read_ahead_kb, iosched/fifo_batch):
	// a rule that tests one sees iosched's value or the one before,
	// depending on who runs first, so its test is not known.
	Written []string
}

// For returns the writes that could apply to disk d, as ForKnown does
// from the snapshot alone.
func (s *Set) For(d *sysfs.Device) []Write { return s.ForKnown(d, Known{}) }

// ForKnown returns the writes that could apply to disk d: the udev rules
// whose conditions do not rule d out on an add or change event (following
// GOTO and LABEL as udevd does), then the active tuned profile's disk
// units that would take d. A condition the snapshot does not decide is
// decided from k when it can be; only what stays undecided is a Write's
// Unknown.
func (s *Set) ForKnown(d *sysfs.Device, k Known) []Write {
	if s == nil {
		return nil
	}
	var out []Write
	for _, f := range s.udev {
		out = append(out, f.writesFor(d, k)...)
	}
	out = append(out, s.tuned.writesFor(d, k)...)
	return out
}

// writesFor runs f's rules for d as udevd would on an add and on a change
// event. A GOTO is taken only when its rule surely applies: when that is
// not known, the rules it would skip are kept, since they may run.
func (f *udevFile) writesFor(d *sysfs.Device, k Known) []Write {
	type key struct{ rule, write int }
	found := map[key]*Write{}
	var order []key
	for _, action := range []string{"add", "change"} {
		ev := udevEvent{action: action, dev: d, known: k}
		for i := 0; i < len(f.rules); i++ {
			r := f.rules[i]
			v, open := r.eval(ev)
			if v == fails {
				continue
			}
			for j, w := range r.writes {
				k := key{i, j}
				if found[k] == nil {
					found[k] = &Write{Kind: UdevRule, File: f.path, Line: w.line, RuleLine: r.line, Attribute: w.attr, Value: w.value}
					order = append(order, k)
				}
				fw := found[k]
				fw.Actions = append(fw.Actions, action)
				for _, u := range open {
					if !slices.Contains(fw.Unknown, u) {
						fw.Unknown = append(fw.Unknown, u)
					}
				}
			}
			if v == holds && r.gotoIdx > i {
				i = r.gotoIdx - 1 // the label's rule runs next
			}
		}
	}
	out := make([]Write, 0, len(order))
	for _, k := range order {
		out = append(out, *found[k])
	}
	return out
}
