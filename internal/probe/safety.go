package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/sysfs"
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
	if f, e := originals.Read(originalsPath(stateDir, name)); e == nil && f.PID > 0 {
		who = fmt.Sprintf(" (pid %d)", f.PID)
	}
	ref := refuse(name, "another probe of %s is running%s, or iosched is writing its settings: its lock in %s is held", name, who, locks.Path())
	ref.(*Refusal).Busy = true
	ref.(*Refusal).Err = err // the *disklock.BusyError
	return unlock, ref
}

// IsBusy reports whether err is a Refusal because others use or probe the
// disk.
func IsBusy(err error) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Busy
}

// record is a probe's record of its disk in the state directory
// (probe-DISK.originals.json): an originals.File of one Record, the values
// a switch resets as they were before the first, and the states the probe
// left the disk in. It is saved before each switch and after it, so that a
// record found after a crash is replayed only while the disk still shows
// what the probe left (originals.Record.Check).
type record struct {
	path string
	name string
	file originals.File
}

func originalsPath(stateDir, name string) string {
	return filepath.Join(stateDir, "probe-"+name+".originals.json")
}

// newRecord reads the disk's current values of what a switch resets.
func newRecord(fs sysfs.FS, stateDir, name string) (*record, error) {
	values, err := originals.Capture(fs, name)
	if err != nil {
		return nil, err
	}
	rec := &originals.Record{DiskSeq: fs.DiskSeq(name), Values: values}
	return &record{path: originalsPath(stateDir, name), name: name,
		file: originals.File{BootID: originals.BootID(), PID: os.Getpid(), Disks: map[string]*originals.Record{name: rec}}}, nil
}

func (r *record) disk() *originals.Record { return r.file.Disks[r.name] }

func (r *record) save() error {
	r.file.Saved = time.Now().UTC()
	return r.file.Write(r.path, true)
}

// switchTo switches the disk to sched, the record saying first that the
// disk may show sched, and after the switch what it shows. Only the
// probe's write chain calls it.
func (r *record) switchTo(fs sysfs.FS, sched string) error {
	r.disk().Pending(map[string]string{"scheduler": sched})
	if err := r.save(); err != nil {
		return fmt.Errorf("%s: recording the switch to %s: %w", r.name, sched, err)
	}
	if err := setScheduler(fs, r.name, sched); err != nil {
		return err
	}
	now, err := originals.Capture(fs, r.name)
	if err != nil {
		return fmt.Errorf("%s: reading the settings after the switch to %s: %w", r.name, sched, err)
	}
	r.disk().Landed(now)
	if err := r.save(); err != nil {
		return fmt.Errorf("%s: recording the switch to %s: %w", r.name, sched, err)
	}
	return nil
}

// setNr writes the disk's nr_requests after a switch, the record saying
// first that the disk may show n and after the write what it shows, and
// returns the value the disk took, read back: it can differ from n (the
// kernel raises a value below its floor), and the figures are that
// value's. Only the probe's write chain calls it.
func (r *record) setNr(fs sysfs.FS, n int) (int, error) {
	r.disk().Pending(map[string]string{"nr_requests": strconv.Itoa(n)})
	if err := r.save(); err != nil {
		return 0, fmt.Errorf("%s: recording nr_requests %d: %w", r.name, n, err)
	}
	got, _, err := fs.WriteReadQueueAttr(r.name, "nr_requests", strconv.Itoa(n))
	if err != nil {
		return 0, fmt.Errorf("%s: nr_requests %d: %w", r.name, n, err)
	}
	now, err := originals.Capture(fs, r.name)
	if err != nil {
		return 0, fmt.Errorf("%s: reading the settings after nr_requests %d: %w", r.name, n, err)
	}
	r.disk().Landed(now)
	if err := r.save(); err != nil {
		return 0, fmt.Errorf("%s: recording nr_requests %d: %w", r.name, n, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(got))
	if err != nil {
		return 0, fmt.Errorf("%s: nr_requests reads back %q, not a number", r.name, got)
	}
	return v, nil
}

// growTags gives the disk its full hardware tags back after the probe
// set none's pool below them (nrState.shrunk), by a write of the tags
// under none (forceNr), switching to none first when the disk runs
// another scheduler: the switch or restore that follows sets the rest.
// Only the probe's write chain calls it.
func (r *record) growTags(fs sysfs.FS, tags int) error {
	cur, err := fs.ReadQueueAttr(r.name, "scheduler")
	if err != nil {
		return err
	}
	if cur != "none" {
		if err := r.switchTo(fs, "none"); err != nil {
			return err
		}
	}
	if _, err := forceNr(fs, r.name, tags, func(n int) (int, error) { return r.setNr(fs, n) }); err != nil {
		return fmt.Errorf("%s: growing the hardware tags back to %d: %w", r.name, tags, err)
	}
	return nil
}

// Recovered is one disk whose interrupted probe's record was dealt with
// by RecoverInterrupted.
type Recovered struct {
	Device string
	// Restored: the values were put back. Else the record was dropped
	// because it no longer applies (Note says why), moved aside because
	// it could not be read (Aside is where), or restoring failed (Err;
	// the record stays for the next try).
	Restored bool
	Note     string
	Aside    string
	Err      error
}

// RecoverInterrupted puts back the settings of every probe in stateDir that
// ended without restoring them (killed with SIGKILL, a crash, a power cut
// does not count: the kernel's defaults are back after a boot), and clears
// their records. A record is replayed only while the disk still shows what
// the probe left: a disk set otherwise since keeps its values, and the
// record is dropped (Note says what differs). An unreadable record is moved
// aside, never taken for nothing to restore. A probe still running (its
// lock held) is left alone. The daemon calls it at start; `iosched probe`
// before probing.
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
	f, err := originals.Read(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return r
	case err != nil:
		aside, merr := originals.MoveAside(p)
		if merr != nil {
			r.Err = fmt.Errorf("the record is unreadable (%w) and could not be moved aside: %w", err, merr)
			return r
		}
		r.Aside = aside
		r.Note = fmt.Sprintf("the record is unreadable (%v): moved aside to %s; nothing was restored, check the disk's settings by hand", err, aside)
		return r
	}
	rec := f.Disks[name]
	switch {
	case rec == nil:
		r.Note = "the record names no values of this disk"
	case f.BootID != originals.BootID():
		r.Note = "recorded before the last boot: the kernel's defaults are back"
	case !fs.Exists(name) || fs.DiskSeq(name) != rec.DiskSeq:
		r.Note = "the disk is gone (or another took its name)"
	default:
		if err := rec.CheckDisk(fs, name); err != nil {
			r.Note = fmt.Sprintf("not restored: %v; its values are someone else's since", err)
			break
		}
		if err := rec.Restore(fs, name); err != nil {
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

// openNode opens the disk's node read-only for direct I/O and checks it is
// the disk (its device number), saying plainly why it cannot be.
func openNode(devDir, name, majorMinor string) (int, error) {
	p := filepath.Join(devDir, name)
	// O_NONBLOCK, and O_DIRECT only once the node is known to be the
	// disk: a FIFO put in its place would hold open(2) until a writer
	// comes (and refuses O_DIRECT with a misleading EINVAL).
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, refuse(name, "the device node %s is missing", p)
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
	// Now direct I/O, and reads that wait for the disk: io_uring answers
	// EAGAIN for a read of an O_NONBLOCK file rather than queue it
	// (io_uring/rw.c).
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK|unix.O_DIRECT)
	}
	switch {
	case errors.Is(err, unix.EINVAL):
		unix.Close(fd)
		return -1, refuse(name, "%s does not support direct I/O", p)
	case err != nil:
		unix.Close(fd)
		return -1, fmt.Errorf("setting O_DIRECT on %s: %w", p, err)
	}
	return fd, nil
}

// readStat reads the disk's stat counters (one open, read and close).
func readStat(fs sysfs.FS, name string) (observe.Sample, error) {
	d, err := observe.Open(observe.StatPath(fs.Root(), name))
	if err != nil {
		return observe.Sample{}, err
	}
	defer d.Close()
	return d.Read()
}

// observedDepth is the mean number of requests the disk had in flight
// over a measurement elapsed long, from the reads of its stat just before
// and after: field 11, the milliseconds its completed requests spent in
// flight, summed (the kernel adds each request's time from its start to
// its completion when it completes: part_stat nsecs in block/blk-mq.c,
// shown by part_stat_show in block/genhd.c), over the measurement's
// length (Little's law). Requests are counted at completion, so every
// read of a measurement is counted once the engine has waited for them
// all. 0 when the counter went back.
func observedDepth(before, after observe.Stat, elapsed time.Duration) float64 {
	queued, ok := observe.TicksBetween(before.TimeInQueue, after.TimeInQueue)
	if !ok || elapsed <= 0 {
		return 0
	}
	return float64(queued) / (float64(elapsed) / float64(time.Millisecond))
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
	p, err := observe.Between(a, b)
	if err != nil {
		return fmt.Errorf("busy check: %s: %w", name, err)
	}
	ios := (b.ReadIOs - a.ReadIOs) + (b.WriteIOs - a.WriteIOs)
	rate := p.IOPS()
	if rate > busyIOPS || b.InFlight > 0 && a.InFlight > 0 {
		err := refuse(name, "the disk is busy: %d I/Os by others in %s (%.0f/s, more than %d/s), %d in flight", ios, sample, rate, busyIOPS, b.InFlight)
		err.(*Refusal).Busy, err.(*Refusal).Err = true, ErrOthersIO
		return err
	}
	return nil
}
