package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

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

// lock is the state directory's lock of one disk: one byte of the
// directory's one lock file (locksFile), at an offset derived from the
// disk's name, locked with an open file description lock (fcntl
// F_OFD_SETLK). A probe killed with SIGKILL leaves it free; whether it is
// held can be asked (F_OFD_GETLK) without taking it, where testing an
// flock means taking it for a moment, which makes a probe starting at that
// moment refuse its disk as busy. One file for every disk, never removed:
// the daemon takes a disk's lock around every write, and a file a disk
// would cost a create and a removal in one directory each time, which
// slowed a burst of new disks down (contrib/bench/README.md, "The disks'
// locks around the daemon's writes").
type lock struct{ fd int }

// locksFile is the state directory's lock file.
const locksFile = "disks.lock"

// diskByte is the disk's byte of the lock file, as a write lock: an
// offset from a 62-bit hash of its name (two names of disks present at
// once sharing one would make one wait for the other, no worse).
func diskByte(name string) *unix.Flock_t {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum64() >> 2), Len: 1}
}

// Hold takes the disk's lock as a probe does, through an open lock file of
// its own: what another process's probe holds, for tests of the daemon and
// the CLI (writers take it with Exclude). A held lock is a Refusal with
// Busy set. release gives it back.
func Hold(stateDir, name string) (release func(), err error) {
	l, err := takeLock(stateDir, name)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// Exclude is Hold for a writer of the disk's settings (the daemon's
// passes and its restore at stop, `iosched apply`): while it holds the lock
// no probe starts on the disk, so the writer's check and its writes are one
// step (two scheduler switches at once on one queue can crash the kernel,
// and a probe would put its originals back over the writes). A lock held
// by a probe (or another writer) is a Refusal with Busy set (see IsBusy):
// the writer must leave the disk alone for now. Where no lock can be made
// at all (a state directory that is not one, is read-only, or is not ours
// to write), no probe can take one either: release is then a no-op and err
// nil, and the writer goes on. Any other failure (out of descriptors, say)
// is returned: the writer leaves the disk for its next pass. release is
// never nil.
//
// Writers of one process lock through one open lock file (see writers), so
// a writer's lock costs two fcntl calls and no descriptor.
func Exclude(stateDir, name string) (release func(), err error) {
	writers.mu.Lock()
	defer writers.mu.Unlock()
	f, err := writers.file(stateDir)
	switch {
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EROFS), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EEXIST):
		return func() {}, nil
	case err != nil:
		return func() {}, err
	case f.held[name]:
		// Locks of one open file do not exclude each other: this
		// process's other writer of the disk must end first.
		return func() {}, busy(stateDir, name)
	}
	if err := unix.FcntlFlock(uintptr(f.fd), unix.F_OFD_SETLK, diskByte(name)); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return func() {}, busy(stateDir, name)
		}
		return func() {}, fmt.Errorf("probe lock %s: %w", filepath.Join(stateDir, locksFile), err)
	}
	f.held[name] = true
	released := false
	return func() {
		writers.mu.Lock()
		defer writers.mu.Unlock()
		if !released {
			released = true
			unlock := diskByte(name)
			unlock.Type = unix.F_UNLCK
			_ = unix.FcntlFlock(uintptr(f.fd), unix.F_OFD_SETLK, unlock)
			delete(f.held, name)
		}
	}, nil
}

// writers are the lock files this process's writers lock through, each
// open for the process's life: one descriptor a write would hold as many
// at once as disks are written at once, and the process's descriptor
// table, growing, waits for an RCU grace period each time it doubles. (The
// daemon and apply each use one state directory; tests use many.)
var writers = writerLocks{files: map[string]*writerFile{}}

type writerLocks struct {
	mu    sync.Mutex
	files map[string]*writerFile // by state directory
}

type writerFile struct {
	fd   int
	held map[string]bool // disks a writer of this process holds
}

// file opens stateDir's lock file for writers, or returns the one open.
func (w *writerLocks) file(stateDir string) (*writerFile, error) {
	if f := w.files[stateDir]; f != nil {
		return f, nil
	}
	fd, err := openLockFile(stateDir)
	if err != nil {
		return nil, err
	}
	f := &writerFile{fd: fd, held: map[string]bool{}}
	w.files[stateDir] = f
	return f, nil
}

// busy is the refusal for a disk whose lock is held, naming the probe's
// process when a probe's originals record says it.
func busy(stateDir, name string) error {
	who := ""
	var o Originals
	if b, e := os.ReadFile(originalsPath(stateDir, name)); e == nil && json.Unmarshal(b, &o) == nil && o.PID > 0 {
		who = fmt.Sprintf(" (pid %d)", o.PID)
	}
	err := refuse(name, "another probe of %s is running%s, or iosched is writing its settings: its lock in %s is held", name, who, filepath.Join(stateDir, locksFile))
	err.(*Refusal).Busy = true
	return err
}

// IsBusy reports whether err is a Refusal because others use or probe the
// disk.
func IsBusy(err error) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Busy
}

// takeLock takes the disk's lock through an open lock file of its own, or
// says it is held.
func takeLock(stateDir, name string) (*lock, error) {
	fd, err := openLockFile(stateDir)
	if err != nil {
		return nil, err
	}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, diskByte(name)); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, busy(stateDir, name)
		}
		return nil, fmt.Errorf("probe lock %s: %w", filepath.Join(stateDir, locksFile), err)
	}
	return &lock{fd: fd}, nil
}

// openLockFile opens stateDir's lock file, making both when missing.
func openLockFile(stateDir string) (int, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return -1, fmt.Errorf("state directory: %w", err)
	}
	p := filepath.Join(stateDir, locksFile)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	}
	if err != nil {
		return -1, fmt.Errorf("probe lock %s: %w", p, err)
	}
	return fd, nil
}

func (l *lock) release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd) // closing drops the lock
		l.fd = -1
	}
}

// lockFree reports whether nobody holds the disk's lock (a probe that
// died does not).
func lockFree(stateDir, name string) bool {
	fd, err := unix.Open(filepath.Join(stateDir, locksFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		// No lock where none can be (a state directory that is a file,
		// or missing): nobody probes through it.
		return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
	}
	defer unix.Close(fd)
	lk := diskByte(name)
	if unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, lk) != nil {
		return false
	}
	return lk.Type == unix.F_UNLCK
}

// Probing reports whether a probe of the disk is running now (its lock in
// stateDir is held): the daemon must not repair the scheduler it switches
// as drift, nor start another.
func Probing(stateDir, name string) bool {
	return sysfs.ValidateName(name) == nil && !lockFree(stateDir, name)
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
func RecoverInterrupted(stateDir string, fs sysfs.FS) ([]Recovered, error) {
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
		lk, err := takeLock(stateDir, name)
		if err != nil {
			var ref *Refusal
			if errors.As(err, &ref) && ref.Busy {
				continue
			}
			out = append(out, Recovered{Device: name, Err: err})
			continue
		}
		r := recoverOne(stateDir, fs, name)
		lk.release()
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
