package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/disklock"
	"github.com/iosched/iosched/internal/atomicfile"
	"github.com/iosched/iosched/sysfs"
)

// Refusal is a probe that was not started, and why. Nothing was changed.
type Refusal struct {
	Device string
	Reason string
	// Busy: others were using or probing the disk; a later try may be
	// allowed.
	Busy bool
	// Err is the cause, when one is: the error opening the disk's node, or
	// ErrOthersIO. What a person can do about it (Options.Force, root) is
	// for the caller to say.
	Err error
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: probe refused: %s", r.Device, r.Reason) }

func (r *Refusal) Unwrap() error { return r.Err }

// ErrOthersIO is the cause of a refusal of a disk others are reading or
// writing; Options.Force probes it anyway.
var ErrOthersIO = errors.New("others are using the disk")

func refuse(dev, format string, a ...any) error {
	return &Refusal{Device: dev, Reason: fmt.Sprintf(format, a...)}
}

// lockDisk takes the disk's lock for a probe (or a recovery): a lock
// someone holds is a Refusal with Busy set, naming the probe's process
// when a probe's originals record in stateDir says it.
func lockDisk(locks *disklock.Locks, stateDir, name string) (unlock func(), err error) {
	unlock, err = locks.Lock(name)
	if !disklock.IsBusy(err) {
		return unlock, err
	}
	who := ""
	var o Originals
	if b, e := os.ReadFile(originalsPath(stateDir, name)); e == nil && json.Unmarshal(b, &o) == nil && o.PID > 0 {
		who = fmt.Sprintf(" (pid %d)", o.PID)
	}
	ref := refuse(name, "another probe of %s is running%s, or iosched is writing its settings: its lock in %s is held", name, who, locks.Path())
	ref.(*Refusal).Busy = true
	return unlock, ref
}

// IsBusy reports whether err is a Refusal because others use or probe the
// disk.
func IsBusy(err error) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Busy
}

// Originals are the values of the settings a probe changes, as they were
// before its first switch, kept in the state directory until they are back.
type Originals struct {
	Device  string `json:"device"`
	DiskSeq string `json:"diskseq,omitempty"`
	BootID  string `json:"boot_id"`
	PID     int    `json:"pid"`
	// Values: "scheduler", "nr_requests", "wbt_lat_usec", and the
	// original scheduler's "iosched/*": everything a switch resets
	// (sysfs.Attr.Resets).
	Values map[string]string `json:"values"`
	Saved  time.Time         `json:"saved"`
}

func originalsPath(stateDir, name string) string {
	return filepath.Join(stateDir, "probe-"+name+".originals.json")
}

// readOriginals reads the disk's current values of what a switch resets.
func readOriginals(fs sysfs.FS, name string) (*Originals, error) {
	d, err := fs.DeviceFacts(name, sysfs.FactIOSched|sysfs.Attr("nr_requests").Needs()|sysfs.Attr("wbt_lat_usec").Needs())
	if err != nil {
		return nil, err
	}
	if d.Scheduler == nil {
		return nil, fmt.Errorf("%s: no scheduler to record", name)
	}
	o := &Originals{Device: name, DiskSeq: d.DiskSeq, BootID: bootID(), PID: os.Getpid(), Values: map[string]string{"scheduler": *d.Scheduler}}
	for _, t := range []string{"nr_requests", "wbt_lat_usec"} {
		if v, ok := d.Tunables[t]; ok {
			o.Values[t] = v
		}
	}
	for k, v := range d.IOSched {
		o.Values[string(sysfs.ParamAttr(k))] = v
	}
	return o, nil
}

func (o *Originals) save(stateDir string) error {
	o.Saved = time.Now().UTC()
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteWith(originalsPath(stateDir, o.Device), append(b, '\n'), atomicfile.Options{Sync: true})
}

// restore writes back every value that differs from the disk's, in write
// order (sysfs.CompareWriteOrder: the scheduler first, since switching it resets
// the rest). It reads each before writing: a write of an unchanged value
// still freezes the queue.
func (o *Originals) restore(fs sysfs.FS) error {
	attrs := make([]string, 0, len(o.Values))
	for a := range o.Values {
		attrs = append(attrs, a)
	}
	sysfs.SortByWriteOrder(attrs, func(a string) string { return a })
	var errs []error
	for _, a := range attrs {
		want := o.Values[a]
		if cur, err := fs.ReadQueueAttr(o.Device, a); err == nil && cur == want {
			continue
		}
		got, _, err := fs.WriteReadQueueAttr(o.Device, a, want)
		switch {
		case err != nil:
			errs = append(errs, err)
			if a == "scheduler" {
				return errors.Join(errs...) // the rest depends on it
			}
		case got != want:
			errs = append(errs, fmt.Errorf("%s: %s: wrote %q, the kernel kept %q", o.Device, a, want, got))
		}
	}
	return errors.Join(errs...)
}

// Recovered is one disk whose interrupted probe's originals were dealt
// with by RecoverInterrupted.
type Recovered struct {
	Device string
	// Restored: the values were put back. Else the record was dropped
	// because it no longer applies (Note says why), or restoring failed
	// (Err; the record stays for the next try).
	Restored bool
	Note     string
	Err      error
}

// RecoverInterrupted puts back the settings of every probe in stateDir that
// ended without restoring them (killed with SIGKILL, a crash, a power cut
// does not count: the kernel's defaults are back after a boot), and clears
// their records. A probe still running (its lock held) is left alone. The
// daemon calls it at start; `iosched probe` before probing.
func RecoverInterrupted(stateDir string, locks *disklock.Locks, fs sysfs.FS) ([]Recovered, error) {
	paths, err := filepath.Glob(filepath.Join(stateDir, "probe-*.originals.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []Recovered
	for _, p := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "probe-"), ".originals.json")
		if sysfs.ValidateName(name) != nil {
			continue
		}
		// Recovery holds the disk's lock: a probe starting meanwhile
		// would otherwise have its scheduler written and its record
		// removed under it.
		unlock, err := lockDisk(locks, stateDir, name)
		if err != nil {
			var ref *Refusal
			if errors.As(err, &ref) && ref.Busy {
				continue
			}
			out = append(out, Recovered{Device: name, Err: err})
			continue
		}
		r := recoverOne(stateDir, fs, name)
		unlock()
		out = append(out, r)
	}
	return out, nil
}

func recoverOne(stateDir string, fs sysfs.FS, name string) Recovered {
	r := Recovered{Device: name}
	p := originalsPath(stateDir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		r.Err = err
		return r
	}
	var o Originals
	switch err := json.Unmarshal(b, &o); {
	case err != nil || o.Device != name:
		r.Note = "unreadable record dropped"
	case o.BootID != bootID():
		r.Note = "recorded before the last boot: the kernel's defaults are back"
	case !fs.Exists(name) || fs.DiskSeq(name) != o.DiskSeq:
		r.Note = "the disk is gone (or another took its name)"
	default:
		if err := o.restore(fs); err != nil {
			r.Err = err
			return r
		}
		r.Restored = true
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.Err = err
	}
	return r
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// openNode opens the disk's node read-only for direct I/O and checks it is
// the disk (its device number), saying plainly why it cannot be.
func openNode(devDir, name, majorMinor string) (int, error) {
	p := filepath.Join(devDir, name)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, refuse(name, "the device node %s is missing", p)
	case errors.Is(err, unix.EINVAL):
		return -1, refuse(name, "%s does not support direct I/O", p)
	case err != nil:
		// EACCES or EPERM too: which one, and whether root would help (not
		// against a device cgroup or a security module), is the caller's
		// to say.
		r := refuse(name, "open %s read-only: %v", p, err)
		r.(*Refusal).Err = err
		return -1, r
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		unix.Close(fd)
		return -1, refuse(name, "%s is not a block device", p)
	}
	if mm := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))); mm != majorMinor {
		unix.Close(fd)
		return -1, refuse(name, "%s is device %s, not the disk's %s", p, mm, majorMinor)
	}
	return fd, nil
}

// Stat is /sys/block/NAME/stat's counters a probe reports
// (Documentation/block/stat.rst).
type Stat struct {
	Reads, Writes, InFlight uint64
}

func readStat(fs sysfs.FS, name string) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(fs.Root(), "block", name, "stat"))
	if err != nil {
		return Stat{}, err
	}
	f := strings.Fields(string(b))
	if len(f) < 9 {
		return Stat{}, fmt.Errorf("%s stat: %d fields", name, len(f))
	}
	var v [9]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("%s stat: %w", name, err)
		}
	}
	// Fields: reads, reads merged, sectors read, ms reading, writes,
	// writes merged, sectors written, ms writing, in flight.
	return Stat{Reads: v[0], Writes: v[4], InFlight: v[8]}, nil
}

// busyIOPS is the I/O rate by others above which a disk is busy: a probe
// would disturb them, and they the figures. An idle disk does a few I/Os a
// second at most (a journal commit, atime updates).
const busyIOPS = 20

// checkIdle watches the disk's stat for busySample and refuses a busy disk.
func checkIdle(fs sysfs.FS, name string, sample time.Duration) error {
	a, err := readStat(fs, name)
	if err != nil {
		return fmt.Errorf("busy check: %w", err)
	}
	time.Sleep(sample)
	b, err := readStat(fs, name)
	if err != nil {
		return fmt.Errorf("busy check: %w", err)
	}
	ios := (b.Reads - a.Reads) + (b.Writes - a.Writes)
	rate := float64(ios) / sample.Seconds()
	if rate > busyIOPS || b.InFlight > 0 && a.InFlight > 0 {
		err := refuse(name, "the disk is busy: %d I/Os by others in %s (%.0f/s, more than %d/s), %d in flight", ios, sample, rate, busyIOPS, b.InFlight)
		err.(*Refusal).Busy, err.(*Refusal).Err = true, ErrOthersIO
		return err
	}
	return nil
}
