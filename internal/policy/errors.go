package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem in a policy, with where it is.
type Error struct {
	// File is the source's name as given to Parse (the path for Load).
	File string
	// Line and Col are 1-based; 0 when unknown.
	Line, Col int
	// Rule names the rule the problem is in, `rule 3 "ublk"` (or `rule 3`
	// when it has no valid name); empty outside rules.
	Rule string
	// Key is the key's path, relative to the rule inside one
	// ("match.class", "set.iosched.fifo_batch"), from the top otherwise
	// ("daemon.uevent_source").
	Key string
	Msg string
}

// Error formats the problem as FILE:LINE:COL: rule 2 "x": key: message,
// leaving out what is not known.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
		if e.Col > 0 {
			b.WriteString(strconv.Itoa(e.Col))
			b.WriteByte(':')
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Rule != "" {
		b.WriteString(e.Rule)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a policy, in file order and then in the
// order they appear in each file. Parse returns it as *Errors.
type Errors []*Error

// Error is one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (es *Errors) Unwrap() []error {
	out := make([]error, len(*es))
	for i, e := range *es {
		out[i] = e
	}
	return out
}

// As lets errors.As fill a policy.Errors as well as a *policy.Errors.
func (es *Errors) As(target any) bool {
	if t, ok := target.(*Errors); ok {
		*t = *es
		return true
	}
	return false
}

// sortByPosition orders one file's errors by where they are; errors without
// a position stay after those with one, in the order found.
func sortByPosition(es Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// ruleLabel is how errors and logs name a rule: `rule 3 "ublk"`.
func ruleLabel(index int, name string) string {
	if name == "" {
		return fmt.Sprintf("rule %d", index)
	}
	return fmt.Sprintf("rule %d %q", index, name)
}
