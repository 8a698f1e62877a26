package conflicts

import (
	"fmt"
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
	root string
	// udev are the rules files in udevd's order; only those that write a
	// queue attribute keep their rules, the others what they may set.
	udev      []*udevFile
	udevWrite bool
	udevArch  string // what CONST{arch} is: the udevd binary's architecture
	tuned     *tunedConfig
	// Problems are files that could not be read or lines udevd would
	// reject: the set is what could be read.
	Problems []string
	// Rejected are the udev rules udevd refuses when it reads them, with
	// its reason (each is among Problems too).
	Rejected []Rejection
	// Notes say which reading was followed where that matters: the
	// udevd found is not the one whose reading this package implements,
	// or none was found.
	Notes []string
	// Udevd is the version of systemd-udevd found under the root ("" when
	// none is found); the rules are read as UdevdVersion reads them.
	Udevd string
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
	s.Udevd, s.udevArch = findUdevd(root)
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
		for _, r := range f.rejected {
			s.Problems = append(s.Problems, r.String())
		}
		s.Rejected = append(s.Rejected, f.rejected...)
		s.udevWrite = s.udevWrite || f.writes()
		s.udev = append(s.udev, f.summary())
	}
	if sem := s.udevSemantics(); sem != "" && s.udevWrite {
		s.Notes = append(s.Notes, sem)
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
		if r.writes() {
			return true
		}
	}
	return false
}

// summary is f as the Set keeps it: its rules when they write a queue
// attribute, set or import properties, or add links or tags (which later
// files' rules may test or put in a value), else nothing but its name.
func (f *udevFile) summary() *udevFile {
	for _, r := range f.rules {
		for _, t := range r.tokens {
			if t.typ == tkAssignEnv || t.typ == tkAssignDevlink || t.typ == tkAssignTag ||
				(t.typ >= tkImportFile && t.typ <= tkImportParent) || (t.typ == tkAssignAttr && t.queue != "") {
				return f
			}
		}
	}
	return &udevFile{path: f.path}
}

// Empty reports whether nothing found writes a queue attribute.
func (s *Set) Empty() bool { return s == nil || (!s.udevWrite && s.tuned.empty()) }

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
	// Possible is true when the write is not certain: it is made only if
	// conditions not known here hold (Unknown), or only on some of the
	// ways through the rules (Reason says so).
	Possible bool   `json:",omitempty"`
	Reason   string `json:",omitempty"`
	// UnknownValue are the parts of Value that could not be known here
	// (a udev substitution such as $env{ID_SCHED}, left in Value as
	// written): the value written is not known.
	UnknownValue []string `json:",omitempty"`
}

// Where is the file and line, "FILE:LINE".
func (w Write) Where() string { return w.File + ":" + strconv.Itoa(w.Line) }

// Overrides reports whether the write would leave the attribute at another
// value than want.
func (w Write) Overrides(want string) bool {
	want = strings.TrimSpace(want)
	if len(w.UnknownValue) > 0 {
		return true
	}
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
		verb := "sets"
		if w.Possible {
			verb = "may set"
		}
		fmt.Fprintf(&b, "tuned profile %q (%s) %s %s ", w.Profile, w.Where(), verb, w.Attribute)
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
		verb := "sets"
		if w.Possible {
			verb = "may write"
		}
		fmt.Fprintf(&b, "udev rule %s %s %s to %q on %s events", w.Where(), verb, w.Attribute, w.Value, strings.Join(w.Actions, " and "))
		if len(w.UnknownValue) > 0 {
			fmt.Fprintf(&b, " (an unknown value: %s not known here)", strings.Join(w.UnknownValue, ", "))
		}
	}
	if len(w.Unknown) > 0 {
		fmt.Fprintf(&b, " if %s (not known here)", strings.Join(w.Unknown, ", "))
	} else if w.Reason != "" {
		fmt.Fprintf(&b, " (%s)", w.Reason)
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
	// Exists tells whether a file or directory exists below the disk's
	// sysfs directory, as udevd's TEST does (rel as a rule writes it:
	// "mq"). An error means it cannot be told here; nil: not known.
	Exists func(rel string) (bool, error)
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
// GOTO and LABEL as udevd does, both ways where a GOTO's conditions are
// not known), then the active tuned profile's disk units that would take
// d. A condition the snapshot does not decide is decided from k when it
// can be; only what stays undecided is a Write's Unknown, and makes it
// Possible.
func (s *Set) ForKnown(d *sysfs.Device, k Known) []Write {
	if s == nil {
		return nil
	}
	out := s.udevWrites(d, k)
	out = append(out, s.tuned.writesFor(d, k)...)
	return out
}

// udevSemantics names the reading of udev rules followed, when the
// udevd found under the root is not the one whose reading this package
// implements: "" when it is.
func (s *Set) udevSemantics() string {
	switch {
	case s.Udevd == "":
		return fmt.Sprintf("no systemd-udevd found to tell its version: udev rules read as systemd-udevd %d reads them", UdevdVersion)
	case udevdMajor(s.Udevd) != UdevdVersion:
		return fmt.Sprintf("systemd-udevd here is %s: udev rules read as systemd-udevd %d reads them", s.Udevd, UdevdVersion)
	}
	return ""
}
