package cli

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/iosched/iosched/internal/conflicts"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// loadWriters reads the udev rules and tuned profile under --root. A
// --sysfs tree other than /sys is another machine's (a copy, a fixture):
// this machine's rules say nothing about it, so they are read only when
// --root is given too. nil: nothing to read.
func (e *env) loadWriters() (*conflicts.Set, []string) {
	if filepath.Clean(e.sysfsRoot) != paths.Default.Sys && (e.flags == nil || !e.flags.Changed("root")) {
		return nil, nil
	}
	set, err := conflicts.Load(e.root)
	if err != nil {
		return nil, []string{fmt.Sprintf("could not read the udev rules and tuned profile under %s: %v", e.root, err)}
	}
	var problems []string
	for _, p := range set.Problems {
		problems = append(problems, "reading other writers of queue settings: "+p)
	}
	problems = append(problems, set.Notes...)
	return set, problems
}

// warnWriters adds to each disk's plan a warning for each udev rule or
// tuned profile setting that could apply to the disk and would leave a
// setting the policy makes at another value, and returns what could not
// be read.
func (e *env) warnWriters(rs []diskResult) []string {
	set, problems := e.loadWriters()
	if set.Empty() {
		return problems
	}
	fs, err := e.fs()
	if err != nil {
		return append(problems, err.Error())
	}
	for i := range rs {
		if r := &rs[i]; r.err == nil {
			r.Plan.Warnings = append(r.Plan.Warnings, writerWarnings(set, fs, r.Assessment)...)
		}
	}
	return problems
}

// writerConflicts is warnWriters for check: one line per disk and writer.
func (e *env) writerConflicts(as []pipeline.Assessment) []string {
	set, problems := e.loadWriters()
	if set.Empty() {
		return problems
	}
	fs, err := e.fs()
	if err != nil {
		return append(problems, err.Error())
	}
	for _, a := range as {
		if a.Plan.Name == "" {
			a.Plan = plan.For(a.Device, a.Eval)
		}
		for _, w := range writerWarnings(set, fs, a) {
			problems = append(problems, a.Device.Name+": "+w)
		}
	}
	return problems
}

// writerWarnings words the writes of set that could undo a's policy. What
// the rules and tuned test of the disk is read from its directory in fs
// when a's snapshot (read for what the policy needs) does not hold it; a
// missing file means absent only on the kernel's own tree (a copied one
// may just lack it).
func writerWarnings(set *conflicts.Set, fs sysfs.FS, a pipeline.Assessment) []string {
	if len(a.Eval.Settings) == 0 {
		return nil
	}
	known := conflicts.Known{Attr: func(rel string) (string, bool, error) {
		v, err := fs.ReadDiskAttr(a.Device.Name, rel)
		switch {
		case err == nil:
			return v, true, nil
		case errors.Is(err, iofs.ErrNotExist) && fs.Live():
			return "", false, nil
		}
		return "", false, err
	}}
	known.Exists = func(rel string) (bool, error) {
		_, err := fs.ReadDiskAttr(a.Device.Name, rel)
		switch {
		case err == nil, errors.Is(err, syscall.EISDIR):
			return true, nil
		case errors.Is(err, iofs.ErrNotExist) && fs.Live():
			return false, nil
		}
		return false, err
	}
	for _, s := range a.Eval.Settings {
		known.Written = append(known.Written, s.Attribute)
	}
	var out []string
	for _, w := range set.ForKnown(a.Device, known) {
		for _, s := range a.Eval.Settings {
			if s.Attribute != w.Attribute {
				continue
			}
			want, ok := policyValue(a, s.Attribute)
			if !ok || !w.Overrides(want) {
				continue
			}
			who := "tuned"
			if w.Kind == conflicts.UdevRule {
				who = "udevd runs it after iosched and"
			}
			undoes := "undoes"
			if len(w.Unknown) > 0 {
				undoes = "may undo" // only if what Describe names holds
			}
			out = append(out, fmt.Sprintf("%s; %s %s the policy's %s = %s (rule %q)", w.Describe(), who, undoes, s.Attribute, want, s.Rule))
		}
	}
	return out
}

// policyValue is the value the policy leaves attr at on the disk: the
// planned one, or the current one when it is in place; false when the
// setting cannot be made (skipped).
func policyValue(a pipeline.Assessment, attr string) (string, bool) {
	for _, s := range a.Plan.Skipped {
		if s.Attribute == attr {
			return "", false
		}
	}
	for _, c := range a.Plan.Changes {
		if c.Attribute == attr {
			return c.To, true
		}
	}
	d := a.Device
	switch param, ok := strings.CutPrefix(attr, "iosched/"); {
	case attr == "scheduler":
		if d.Scheduler != nil {
			return *d.Scheduler, true
		}
	case ok:
		v, ok := d.IOSched[param]
		return v, ok
	default:
		v, ok := d.Tunables[attr]
		return v, ok
	}
	return "", false
}
