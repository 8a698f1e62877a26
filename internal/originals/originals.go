package originals

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/sysfs"
)

// Record is one disk's remembered values.
type Record struct {
	// DiskSeq tells the disk from another that later takes its name.
	DiskSeq string `json:"diskseq,omitempty"`
	// Values are the settings as they were before the first change, by
	// attribute ("scheduler", "nr_requests", "iosched/fifo_batch").
	Values map[string]string `json:"values"`
	// Unknown are attributes whose original value was lost (the daemon's
	// file was unreadable).
	Unknown []string `json:"unknown,omitempty"`
	// Left are the states the writer may have left the disk in: the
	// record is still true while the disk shows one of them (see
	// Record.Check). A record without any (written by an iosched that did
	// not keep them) cannot be checked.
	Left []map[string]string `json:"left,omitempty"`
}

// File is the format of every originals file: the daemon's
// restore_on_exit record and a probe's record of its disk.
type File struct {
	// BootID is the boot the values are of: after a reboot every disk
	// has its kernel defaults again, and the file means nothing.
	BootID string `json:"boot_id"`
	// PID is the process that wrote it (a probe's, to name it).
	PID   int                `json:"pid,omitempty"`
	Saved time.Time          `json:"saved,omitzero"`
	Disks map[string]*Record `json:"disks"`
}

// BootID is this boot's id (/proc/sys/kernel/random/boot_id), "" when it
// cannot be read.
func BootID() string {
	b, err := os.ReadFile(paths.Default.BootID)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Read reads and decodes the file at path. An error that is not
// os.ErrNotExist means the file is unreadable (see MoveAside).
func Read(path string) (*File, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for name, r := range f.Disks {
		if r == nil || r.Values == nil || sysfs.ValidateName(name) != nil {
			delete(f.Disks, name) // nothing to put back, or no disk's
		}
	}
	return &f, nil
}

// readFile is the one read of an originals file: a record is iosched's own
// file in its state directory, so a link, a FIFO (whose open would wait for
// a writer for ever) or a device there is refused, not followed, and no
// record is larger than a MiB (one disk's values are a few hundred bytes).
func readFile(path string) ([]byte, error) { return fileio.ReadNoFollow(path, 1<<20) }

// Write replaces the file at path with f whole (readers never see half of
// it); sync makes it durable before it returns.
func (f *File) Write(path string, sync bool) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return fileio.WriteWith(path, append(b, '\n'), fileio.Options{Sync: sync})
}

// asideMark is in the name of a file moved aside.
const asideMark = ".unreadable-"

// MoveAside renames an unreadable file at path to
// PATH.unreadable-TIME, so that nothing writes over what may still be
// recovered by hand, and returns the new name.
func MoveAside(path string) (string, error) {
	aside := path + asideMark + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	return aside, nil
}

// Aside lists the files moved aside in dir, sorted: what `status` shows.
func Aside(dir string) ([]string, error) {
	out, err := filepath.Glob(filepath.Join(dir, "*"+asideMark+"*"))
	sort.Strings(out)
	return out, err
}

// Resettable are the attributes a scheduler switch resets, from the
// attribute table (sysfs.AttrSpec.Resets of "scheduler"): the tunables, in
// table order, and sysfs.AllParams for the scheduler's parameters.
func Resettable() []sysfs.Attr {
	var out []sysfs.Attr
	for _, spec := range sysfs.Attributes() {
		if spec.Kind == sysfs.KindTunable && sysfs.Attr("scheduler").Resets(spec.Attr) {
			out = append(out, spec.Attr)
		}
	}
	if sysfs.Attr("scheduler").Resets(sysfs.AllParams) {
		out = append(out, sysfs.AllParams)
	}
	return out
}

// Capture reads the disk's scheduler and every value a switch of it
// resets (Resettable): what must be remembered before switching it.
func Capture(fs sysfs.FS, name string) (map[string]string, error) {
	needs := sysfs.Facts(0)
	for _, a := range Resettable() {
		if a == sysfs.AllParams {
			needs |= sysfs.FactIOSched
		} else {
			needs |= a.Facts()
		}
	}
	d, err := fs.DeviceFacts(name, needs)
	if err != nil {
		return nil, err
	}
	if d.Scheduler == nil {
		return nil, fmt.Errorf("%s: no scheduler to record", name)
	}
	values := map[string]string{"scheduler": *d.Scheduler}
	for _, a := range Resettable() {
		if a == sysfs.AllParams {
			for k, v := range d.IOSched {
				values[string(sysfs.ParamAttr(k))] = v
			}
		} else if v, ok := d.Value(a); ok {
			values[string(a)] = v
		}
	}
	return values, nil
}

// ErrStale is a record the disk no longer bears out: someone set other
// values since its writer left it.
var ErrStale = errors.New("the disk no longer shows what iosched left")

// Check reports whether the disk still shows one of the states r's writer
// left (r.Left), read through read: nil if so (or r keeps none to check),
// else an error wrapping ErrStale that names the first value that differs.
// In a state, a value matches when the disk shows the state's value or the
// original (a write that did not happen, or a restore part done); a
// parameter only while the state's scheduler runs (it goes with it).
func (r *Record) Check(read func(attr string) (string, error)) error {
	if len(r.Left) == 0 {
		return nil
	}
	var first error
	for _, state := range r.Left {
		err := r.shows(state, read)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (r *Record) shows(state map[string]string, read func(string) (string, error)) error {
	attrs := make([]string, 0, len(state))
	for a := range state {
		attrs = append(attrs, a)
	}
	sysfs.SortByWriteOrder(attrs, func(a string) string { return a })
	sched := ""
	for _, a := range attrs {
		if sysfs.Attr(a).Kind() == sysfs.KindParam && state["scheduler"] != "" && sched != state["scheduler"] {
			continue
		}
		cur, err := read(a)
		if err != nil {
			return fmt.Errorf("%w: %s cannot be read (%w)", ErrStale, a, err)
		}
		if a == "scheduler" {
			sched = cur
		}
		if cur != state[a] && cur != r.Values[a] {
			return fmt.Errorf("%w: %s is %q, iosched left %q (the original was %q)", ErrStale, a, cur, state[a], r.Values[a])
		}
	}
	return nil
}

// CheckDisk is Check against the disk's queue attributes in fs.
func (r *Record) CheckDisk(fs sysfs.FS, name string) error {
	return r.Check(func(a string) (string, error) { return fs.ReadQueueAttr(name, a) })
}

// Restore writes back every value that differs from the disk's, in write
// order (the scheduler first, since switching it resets the rest). It
// reads each before writing: a write of an unchanged value still freezes
// the queue.
func (r *Record) Restore(fs sysfs.FS, name string) error {
	attrs := make([]string, 0, len(r.Values))
	for a := range r.Values {
		attrs = append(attrs, a)
	}
	sysfs.SortByWriteOrder(attrs, func(a string) string { return a })
	var errs []error
	for _, a := range attrs {
		want := r.Values[a]
		if cur, err := fs.ReadQueueAttr(name, a); err == nil && cur == want {
			continue
		}
		got, _, err := fs.WriteReadQueueAttr(name, a, want)
		switch {
		case err != nil:
			errs = append(errs, err)
			if a == "scheduler" {
				return errors.Join(errs...) // the rest depends on it
			}
		case got != want:
			errs = append(errs, fmt.Errorf("%s: %s: wrote %q, the kernel kept %q", name, a, want, got))
		}
	}
	return errors.Join(errs...)
}

// Pending adds to r.Left the state a write about to be made leaves: the
// values it sets (a scheduler switch's resets are not known until it is
// done; Landed replaces it then). The states kept before stay: until the
// write is done the disk shows one of them.
func (r *Record) Pending(set map[string]string) {
	r.Left = append(r.Left, set)
}

// Landed makes state the one state r's writer left: a write is done and
// the disk was read after it.
func (r *Record) Landed(state map[string]string) {
	r.Left = []map[string]string{state}
}

// Clone is a deep copy of r.
func (r *Record) Clone() *Record {
	c := &Record{DiskSeq: r.DiskSeq, Values: cloneMap(r.Values), Unknown: slices.Clone(r.Unknown)}
	for _, s := range r.Left {
		c.Left = append(c.Left, cloneMap(s))
	}
	return c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
