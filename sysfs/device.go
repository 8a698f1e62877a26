package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Tunables are the queue/ attributes iosched reads and may set, in the order
// they are shown. Nothing outside this list (and queue/iosched/) is ever
// written.
var Tunables = []string{
	"read_ahead_kb", "nr_requests", "nomerges", "rq_affinity", "add_random",
	"iostats", "wbt_lat_usec", "max_sectors_kb", "io_timeout",
}

// WriteRank orders attributes in the order they must be written to one disk,
// so that no write undoes an earlier one (see Resets): the scheduler first,
// then nr_requests, then the scheduler's iosched/* parameters, then the other
// tunables in Tunables order.
func WriteRank(attr string) int {
	switch {
	case attr == "scheduler":
		return 0
	case attr == "nr_requests":
		return 1
	case strings.HasPrefix(attr, "iosched/"):
		return 2
	}
	for i, t := range Tunables {
		if t == attr {
			return 3 + i
		}
	}
	return 3 + len(Tunables)
}

// Resets reports whether writing attribute written may change the value of
// attr on the same disk, so attr must be read again after it. Measured on
// kernel 6.18 loop devices:
//   - a scheduler switch sets nr_requests anew (blk_mq_init_sched: twice the
//     tag depth for an elevator, the depth for none), turns writeback
//     throttling off for bfq and on again when it leaves (wbt_lat_usec 0 <->
//     2000), and brings the new scheduler's iosched/* defaults;
//   - writing nr_requests sets mq-deadline's iosched/async_depth to it
//     (dd_depth_updated).
func Resets(written, attr string) bool {
	switch written {
	case "scheduler":
		return attr == "nr_requests" || attr == "wbt_lat_usec" || strings.HasPrefix(attr, "iosched/")
	case "nr_requests":
		return attr == "iosched/async_depth"
	}
	return false
}

// SchedulerParams are the queue/iosched/ files of the mainline schedulers
// (block/mq-deadline.c, block/bfq-iosched.c, block/kyber-iosched.c).
// Schedulers not listed (out of tree) may have any.
var SchedulerParams = map[string][]string{
	"mq-deadline": {"async_depth", "fifo_batch", "front_merges", "prio_aging_expire", "read_expire", "write_expire", "writes_starved"},
	"bfq": {"back_seek_max", "back_seek_penalty", "fifo_expire_async", "fifo_expire_sync", "low_latency", "max_budget",
		"slice_idle", "slice_idle_us", "strict_guarantees", "timeout_sync"},
	"kyber": {"read_lat_nsec", "write_lat_nsec"},
}

// HasParam reports whether scheduler has the iosched parameter param: false
// only when it is a mainline scheduler known not to have it.
func HasParam(scheduler, param string) bool {
	params, known := SchedulerParams[scheduler]
	if !known {
		return scheduler != "none"
	}
	for _, p := range params {
		if p == param {
			return true
		}
	}
	return false
}

// IsTunable reports whether name is one of Tunables.
func IsTunable(name string) bool {
	for _, t := range Tunables {
		if t == name {
			return true
		}
	}
	return false
}

// Device is a snapshot of one whole disk as sysfs showed it when read.
// Pointer fields are nil when the kernel does not have the attribute or it
// could not be read (the reason is then in Errors).
type Device struct {
	Name       string `json:"name"`
	MajorMinor string `json:"major_minor"`
	// DiskSeq is the kernel's sequence number of this disk (Linux 5.15+):
	// a disk removed and created again under the same name and number
	// gets a new one.
	DiskSeq string `json:"diskseq,omitempty"`
	// Path is the resolved device directory relative to the sysfs root,
	// e.g. "devices/pci0000:00/0000:00:02.0/virtio1/block/vda".
	Path   string `json:"path"`
	Class  Class  `json:"class"`
	Driver string `json:"driver"`
	// Transport is how a SCSI disk's host or an NVMe namespace's
	// controller reaches the storage ("virtio_scsi", "ahci", "tcp", ...);
	// "" for other classes.
	Transport string `json:"transport"`
	DMName    string `json:"dm_name,omitempty"`
	DMUUID    string `json:"dm_uuid,omitempty"`
	Multipath bool   `json:"multipath,omitempty"`

	Rotational        *bool   `json:"rotational"`
	Removable         *bool   `json:"removable"`
	HWQueues          int     `json:"hw_queues"`
	SizeBytes         *uint64 `json:"size_bytes"`
	LogicalBlockSize  *uint64 `json:"logical_block_size"`
	PhysicalBlockSize *uint64 `json:"physical_block_size"`
	Zoned             string  `json:"zoned,omitempty"`
	// Hidden is set on a disk the kernel keeps out of /dev: a path of an
	// NVMe multipath namespace, reached through its head (nvme1n1 for
	// nvme1c1n1). Its queue is real: the path is where requests queue.
	Hidden bool `json:"hidden,omitempty"`

	// Scheduler is the active elevator, nil on a bio-based disk (no
	// queue/scheduler file): no scheduler can be set there.
	Scheduler  *string  `json:"scheduler"`
	Schedulers []string `json:"schedulers"`

	// NoWait is whether the driver accepts RWF_NOWAIT I/O; nil when it was
	// not (or could not be) tested, with the reason in NoWaitReason.
	NoWait       *bool  `json:"nowait"`
	NoWaitReason string `json:"nowait_reason,omitempty"`

	Model  string `json:"model"`
	Vendor string `json:"vendor"`
	Serial string `json:"serial"`
	WWID   string `json:"wwid,omitempty"`

	// Tunables holds the current value of each of Tunables the disk has.
	Tunables map[string]string `json:"tunables"`
	// IOSched holds the files under queue/iosched/ of the active scheduler.
	IOSched map[string]string `json:"iosched"`

	// Properties are udev properties, when the caller knows them (from a
	// udev-mode uevent); sysfs does not fill them.
	Properties map[string]string `json:"properties,omitempty"`

	Errors []string `json:"errors"`
}

// BioBased reports whether the disk has no request queue and so no
// scheduler at all: no queue/scheduler file and no hardware queues. A blk-mq
// disk whose scheduler file could not be parsed is not bio-based (Scheduler is
// nil there too, and the reason is in Errors).
func (d *Device) BioBased() bool { return d.Scheduler == nil && d.HWQueues == 0 }

func (d *Device) errorf(format string, a ...any) {
	d.Errors = append(d.Errors, fmt.Sprintf(format, a...))
}

// Facts selects what DeviceFacts reads beyond what every read has: the
// name, major:minor, path, class, driver and transport, and the scheduler.
// A daemon handling 1000 new disks at once reads only what its policy tests
// and sets: every attribute is an open, a read and a close, and they add up
// to most of a pass.
type Facts uint32

const (
	FactIdentity   Facts = 1 << iota // model, vendor, serial, wwid
	FactSize                         // size
	FactBlockSizes                   // logical and physical block size
	FactZoned                        // zoned
	FactRemovable                    // removable
	FactRotational                   // queue/rotational
	FactHidden                       // hidden
	FactHWQueues                     // the entries under mq/
	FactIOSched                      // queue/iosched/*
	factTunable0                     // first of one bit per Tunables entry

	// FactAll is everything: what list, plan and explain show.
	FactAll Facts = 1<<(factTunableShift+9) - 1
)

const factTunableShift = 9

// FactTunable selects the current value of one of Tunables (0 when name is
// not one).
func FactTunable(name string) Facts {
	for i, t := range Tunables {
		if t == name {
			return factTunable0 << i
		}
	}
	return 0
}

// Device reads one whole disk, every fact. It returns ErrNoDevice (wrapped)
// when the disk does not exist; any other problem is recorded in
// Device.Errors.
func (s FS) Device(name string) (*Device, error) { return s.DeviceFacts(name, FactAll) }

// DeviceFacts reads one whole disk: what every read has, and the facts in
// want. Facts not asked for are left unknown (nil, empty), as when the
// kernel does not have them.
func (s FS) DeviceFacts(name string, want Facts) (*Device, error) {
	disk, err := s.OpenDisk(name)
	if err != nil {
		return nil, err
	}
	defer disk.Close()
	return disk.Facts(want, Ident{})
}

// Ident tells a disk from another that later takes its name: its device
// number and (Linux 5.15+) its sequence number, which is never reused
// until a reboot.
type Ident struct {
	MajorMinor string
	DiskSeq    string
}

// Facts reads the disk as DeviceFacts does. When known holds a device
// number and a diskseq (the daemon has them from the disk's uevent), and
// the disk's own diskseq is that one, dev is not read: one open fewer for
// each disk of a burst. An event older than the disk (queued behind events
// that were lost) has another diskseq, and dev is read.
func (disk *Disk) Facts(want Facts, known Ident) (*Device, error) {
	s, name, resolved := disk.fs, disk.name, disk.dir
	d := &Device{Name: name, Tunables: map[string]string{}, IOSched: map[string]string{}, Errors: []string{}}
	d.Path, _ = filepath.Rel(s.rootAbs(), resolved)
	d.Path = filepath.ToSlash(d.Path)
	s.paths.set(name, d.Path)

	r := reader{dir: resolved, fd: disk.fd, dev: d, top: disk.top}
	defer func() { disk.top = r.top }() // the directory is listed once a handle
	d.DiskSeq = r.text("diskseq")
	if known.MajorMinor != "" && known.DiskSeq != "" && known.DiskSeq == d.DiskSeq {
		d.MajorMinor = known.MajorMinor
	} else if b, ok := r.read("dev", true); ok {
		if mm, err := parseMajorMinor(b); err != nil {
			d.errorf("dev: %v", err)
		} else {
			d.MajorMinor = mm
		}
	}
	if want&FactRemovable != 0 {
		d.Removable = r.boolean("removable")
	}
	if want&FactHidden != 0 {
		if h := r.boolean("hidden"); h != nil {
			d.Hidden = *h
		}
	}
	if want&FactSize != 0 {
		if n := r.uint("size"); n != nil {
			bytes := *n * 512 // size is in 512-byte sectors whatever the block size (include/linux/blk_types.h SECTOR_SHIFT)
			d.SizeBytes = &bytes
		}
	}
	if want&FactRotational != 0 {
		d.Rotational = r.boolean("queue/rotational")
	}
	if want&FactBlockSizes != 0 {
		d.LogicalBlockSize = r.uint("queue/logical_block_size")
		d.PhysicalBlockSize = r.uint("queue/physical_block_size")
	}
	if want&FactZoned != 0 {
		if b, ok := r.read("queue/zoned", false); ok {
			d.Zoned = strings.TrimSpace(string(b))
		}
	}

	schedFile := false
	if b, ok := r.read("queue/scheduler", false); ok {
		schedFile = true
		active, offered, err := ParseScheduler(b)
		if err != nil {
			d.errorf("queue/%v", err)
		} else {
			d.Scheduler = &active
			d.Schedulers = offered
		}
	}
	if d.Schedulers == nil {
		d.Schedulers = []string{}
	}
	// BioBased() tells a bio-based disk (no scheduler file, no hardware
	// queue) from one whose scheduler could not be read by mq/.
	if want&FactHWQueues != 0 || d.Scheduler == nil {
		d.HWQueues = r.hwQueues()
	}
	for i, t := range Tunables {
		if want&(factTunable0<<i) == 0 {
			continue
		}
		if b, ok := r.read("queue/"+t, false); ok {
			d.Tunables[t] = strings.TrimSpace(string(b))
		}
	}
	if want&FactIOSched != 0 && d.Scheduler != nil && *d.Scheduler != "none" {
		r.iosched()
	}

	if want&FactIdentity != 0 {
		d.Model = r.text("device/model")
		d.Vendor = r.text("device/vendor")
		d.Serial = r.text("serial")
		if d.Serial == "" {
			d.Serial = r.text("device/serial")
		}
		d.WWID = r.text("wwid")
		if d.WWID == "" {
			d.WWID = r.text("device/wwid")
		}
		if d.WWID == "" {
			d.WWID = r.text("device/wwn")
		}
	}
	classify(d, resolved, s.rootAbs(), &r)
	if want&FactIdentity != 0 && d.Model == "" && d.Class == ClassMMC {
		d.Model = r.text("device/name") // an MMC/SD card's product name
	}
	// Every disk has a queue/ directory, but not while it is being added
	// (device_add_disk registers the queue after the disk) or removed
	// (del_gendisk unregisters it first): then most attributes read as
	// missing, which is not the same as absent. A scheduler file read says
	// it is there.
	if !schedFile && !r.exists("queue") {
		d.errorf("queue: %v", syscall.ENOENT)
	}
	if len(d.Errors) == 0 {
		return d, nil
	}
	// A disk removed between listing and reading shows up as a run of
	// missing files; say so plainly instead. (The directory fd stays valid
	// after removal: ask the path.)
	if _, err := os.Stat(resolved); err != nil {
		return nil, fmt.Errorf("%w: %s (removed while it was read)", ErrNoDevice, name)
	}
	return d, nil
}

// resolve finds a disk's directory and opens it: the target of its
// block/ (or class/block/) link, refusing a partition and a link that leads
// out of the root. On sysfs the link target holds no further links, so one
// readlink does what filepath.EvalSymlinks does with a stat per path
// element; every attribute is then opened relative to the directory, a
// lookup of one or two names where a full path takes eight, each one a
// turn of kernfs's lock, which hot-plug itself holds to add its files.
func (s FS) resolve(name string) (string, int, bool, error) {
	rel := s.blockRel(name)
	target, err := s.readlinkInRoot(rel)
	viaClass := s.noBlock
	if errors.Is(err, fs.ErrNotExist) && !s.noBlock {
		// Partitions are only in class/block: find them there to say so.
		rel, viaClass = filepath.Join("class", "block", name), true
		target, err = s.readlinkInRoot(rel)
	}
	link := s.path(rel)
	var resolved string
	switch {
	case err == nil && filepath.IsAbs(target):
		resolved = filepath.Clean(target)
	case err == nil:
		resolved = filepath.Join(filepath.Dir(link), target)
	case errors.Is(err, syscall.EINVAL):
		resolved = link // a directory, not a link (a hand-made tree)
	case errors.Is(err, fs.ErrNotExist):
		return "", -1, false, fmt.Errorf("%w: %s", ErrNoDevice, name)
	default:
		return "", -1, false, fmt.Errorf("%s: %w", name, err)
	}
	if abs, err := filepath.Abs(resolved); err == nil {
		resolved = abs
	}
	root := s.rootAbs()
	if !isBelow(resolved, root) {
		// A copied tree whose links lead out of it (into the live /sys, say)
		// would show, and let apply act on, another machine's disk.
		return "", -1, false, fmt.Errorf("%s: its link leads out of the sysfs root %s, to %s: refused", name, s.root, resolved)
	}
	// Opened from the root's descriptor: four names to look up on sysfs
	// (devices/virtual/block/loop7), not the whole path from /.
	inRoot, _ := filepath.Rel(root, resolved)
	fd, confined, err := s.openDir(inRoot)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", -1, false, fmt.Errorf("%w: %s", ErrNoDevice, name) // a dangling link
	case err != nil:
		return "", -1, false, fmt.Errorf("%s: %w", name, err)
	}
	// block/ holds whole disks only; class/block partitions too.
	var st unix.Stat_t
	if viaClass && unix.Fstatat(fd, "partition", &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		unix.Close(fd)
		return "", -1, false, fmt.Errorf("%w: %s is a partition, not a whole disk", ErrNoDevice, name)
	}
	return resolved, fd, confined, nil
}

// reader reads attributes below one device directory, opened as fd, and
// records problems in the device's Errors.
type reader struct {
	dir string
	fd  int
	dev *Device
	// top holds the names in the directory, listed once when first needed
	// (nil until then): a name not there is known absent without a lookup.
	// On a loop disk classification alone asked for six absent names
	// (device/driver, dm, md, loop, ...), each a lookup under kernfs's lock.
	// A slice, not a map: a few dozen names, and one map a disk was a
	// sixth of what a burst of new disks allocated.
	top []string
}

// absent reports whether rel's first element is known not to be in the
// directory.
func (r *reader) absent(rel string) bool {
	if r.top == nil {
		names, err := r.list()
		if err != nil {
			return false
		}
		r.top = append(names, ".") // never nil once listed
	}
	first, _, _ := strings.Cut(rel, "/")
	return !slices.Contains(r.top, first)
}

// read returns the file's contents. A missing file is only an error when
// required; any other failure is always recorded.
func (r *reader) read(rel string, required bool) ([]byte, bool) {
	b, err := r.readRel(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !required {
			return nil, false
		}
		r.dev.errorf("%s: %v", rel, unwrapPath(err))
		return nil, false
	}
	return b, true
}

func (r *reader) readRel(rel string) ([]byte, error) {
	if r.absent(rel) {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: syscall.ENOENT}
	}
	for {
		fd, err := unix.Openat(r.fd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return readFD(fd, rel)
	}
}

// readlink is the target of the link rel, or "" when there is none.
func (r *reader) readlink(rel string) string {
	if r.absent(rel) {
		return ""
	}
	var buf [512]byte
	n, err := unix.Readlinkat(r.fd, rel, buf[:])
	if err != nil || n == len(buf) {
		return ""
	}
	return string(buf[:n])
}

// exists reports whether rel is there (a link counts, even dangling).
func (r *reader) exists(rel string) bool {
	if r.absent(rel) {
		return false
	}
	if !strings.Contains(rel, "/") {
		return true
	}
	var st unix.Stat_t
	return unix.Fstatat(r.fd, rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// list lists the names in the disk's directory, reading the descriptor
// the attributes are opened from (an open directory, not O_PATH, for this).
// getdents is called until it returns nothing: a short return does not mean
// the end, as the kernel also stops filling early when a signal is pending
// (fs/readdir.c, filldir64), and Go preempts with SIGURG.
func (r *reader) list() ([]string, error) {
	// From the start, whatever an earlier listing that failed half-way
	// left of the descriptor's position.
	if _, err := unix.Seek(r.fd, 0, 0); err != nil {
		return nil, &fs.PathError{Op: "seek", Path: r.dir, Err: err}
	}
	var buf [8192]byte
	var names []string
	for {
		n, err := unix.Getdents(r.fd, buf[:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "getdents", Path: r.dir, Err: err}
		case n == 0:
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// names lists the directory rel: entries that are directories or links when
// dirsOnly, regular files otherwise.
func (r *reader) names(rel string, dirsOnly bool) ([]string, error) {
	fd, err := unix.Openat(r.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		isDir := e.IsDir() || e.Type()&os.ModeSymlink != 0
		if isDir == dirsOnly && (dirsOnly || e.Type().IsRegular()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (r *reader) text(rel string) string {
	b, ok := r.read(rel, false)
	if !ok {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (r *reader) uint(rel string) *uint64 {
	b, ok := r.read(rel, false)
	if !ok {
		return nil
	}
	v, err := parseUint(b)
	if err != nil {
		r.dev.errorf("%s: %v", rel, err)
		return nil
	}
	return &v
}

func (r *reader) boolean(rel string) *bool {
	b, ok := r.read(rel, false)
	if !ok {
		return nil
	}
	v, err := parseBool(b)
	if err != nil {
		r.dev.errorf("%s: %v", rel, err)
		return nil
	}
	return &v
}

// hwQueues counts the entries under mq/ (one directory per hardware queue on
// a blk-mq disk; absent on a bio-based one).
func (r *reader) hwQueues() int {
	qs, err := r.names("mq", true)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.dev.errorf("mq: %v", unwrapPath(err))
		}
		return 0
	}
	return len(qs)
}

// iosched reads the active scheduler's parameters.
func (r *reader) iosched() {
	names, err := r.names("queue/iosched", false)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.dev.errorf("queue/iosched: %v", unwrapPath(err))
		}
		return
	}
	sort.Strings(names)
	for _, n := range names {
		if b, ok := r.read("queue/iosched/"+n, false); ok {
			r.dev.IOSched[n] = strings.TrimSpace(string(b))
		}
	}
}

// unwrapPath drops the path from a *PathError: the caller already names the
// attribute, and the root is the same for every line.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
