package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
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

// Device reads one whole disk. It returns ErrNoDevice (wrapped) when the disk
// does not exist; any other problem is recorded in Device.Errors.
func (s FS) Device(name string) (*Device, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(s.blockDir(name))
	if err != nil && errors.Is(err, fs.ErrNotExist) && !s.noBlock {
		// Partitions are only in class/block: find them there to say so.
		if r, cerr := filepath.EvalSymlinks(s.path("class", "block", name)); cerr == nil {
			resolved, err = r, nil
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNoDevice, name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := os.Lstat(filepath.Join(resolved, "partition")); err == nil {
		return nil, fmt.Errorf("%w: %s is a partition, not a whole disk", ErrNoDevice, name)
	}
	root := s.resolvedRoot()
	if abs, err := filepath.Abs(resolved); err == nil {
		resolved = abs
	}
	if !isBelow(resolved, root) {
		// A copied tree whose links lead out of it (into the live /sys, say)
		// would show, and let apply act on, another machine's disk.
		return nil, fmt.Errorf("%s: its link leads out of the sysfs root %s, to %s: refused", name, s.root, resolved)
	}
	d := &Device{Name: name, Tunables: map[string]string{}, IOSched: map[string]string{}, Errors: []string{}}
	d.Path, _ = filepath.Rel(root, resolved)
	d.Path = filepath.ToSlash(d.Path)

	r := reader{dir: resolved, dev: d}
	if b, ok := r.read("dev", true); ok {
		if mm, err := parseMajorMinor(b); err != nil {
			d.errorf("dev: %v", err)
		} else {
			d.MajorMinor = mm
		}
	}
	d.Removable = r.boolean("removable")
	if h := r.boolean("hidden"); h != nil {
		d.Hidden = *h
	}
	if n := r.uint("size"); n != nil {
		bytes := *n * 512 // size is in 512-byte sectors whatever the block size (include/linux/blk_types.h SECTOR_SHIFT)
		d.SizeBytes = &bytes
	}
	d.Rotational = r.boolean("queue/rotational")
	d.LogicalBlockSize = r.uint("queue/logical_block_size")
	d.PhysicalBlockSize = r.uint("queue/physical_block_size")
	if b, ok := r.read("queue/zoned", false); ok {
		d.Zoned = strings.TrimSpace(string(b))
	}
	d.HWQueues = r.hwQueues()

	if b, ok := r.read("queue/scheduler", false); ok {
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
	for _, t := range Tunables {
		if b, ok := r.read("queue/"+t, false); ok {
			d.Tunables[t] = strings.TrimSpace(string(b))
		}
	}
	if d.Scheduler != nil && *d.Scheduler != "none" {
		r.iosched()
	}

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
	classify(d, resolved, root, &r)
	if d.Model == "" && d.Class == ClassMMC {
		d.Model = r.text("device/name") // an MMC/SD card's product name
	}
	// Every disk has a queue/ directory, but not while it is being added
	// (device_add_disk registers the queue after the disk) or removed
	// (del_gendisk unregisters it first): then most attributes read as
	// missing, which is not the same as absent.
	if _, err := os.Stat(filepath.Join(resolved, "queue")); err != nil {
		d.errorf("queue: %v", unwrapPath(err))
	}
	// A disk removed between listing and reading shows up as a run of
	// missing files; say so plainly instead.
	if _, err := os.Stat(resolved); err != nil {
		return nil, fmt.Errorf("%w: %s (removed while it was read)", ErrNoDevice, name)
	}
	return d, nil
}

// reader reads attributes below one device directory and records problems in
// the device's Errors.
type reader struct {
	dir string
	dev *Device
}

// read returns the file's contents. A missing file is only an error when
// required; any other failure is always recorded.
func (r *reader) read(rel string, required bool) ([]byte, bool) {
	b, err := readAttr(filepath.Join(r.dir, rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !required {
			return nil, false
		}
		r.dev.errorf("%s: %v", rel, unwrapPath(err))
		return nil, false
	}
	return b, true
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
	entries, err := os.ReadDir(filepath.Join(r.dir, "mq"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.dev.errorf("mq: %v", unwrapPath(err))
		}
		return 0
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
			n++
		}
	}
	return n
}

// iosched reads the active scheduler's parameters.
func (r *reader) iosched() {
	dir := filepath.Join(r.dir, "queue", "iosched")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.dev.errorf("queue/iosched: %v", unwrapPath(err))
		}
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
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
