package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Disk is one disk's directory held open, for a read followed by writes
// (the daemon's pass over a new disk). Everything is looked up from the
// directory: two names for queue/scheduler, where a path from the root
// takes six, and each lookup is a turn of kernfs's lock, which the kernel
// holds to add every switched scheduler's iosched/ files. And once the disk
// is removed every lookup through it fails: nothing read from one disk is
// written to another that has since taken its name. (Where openat2 is
// refused, before Linux 5.6 or under a seccomp filter, writes go by the
// disk's name, confined to the root by hand, and that last guarantee is
// not given.)
//
// Disk has FS's queue attribute methods for this disk, without a name:
// what is read or written through it is this disk's, so an applier
// writes through it. A Disk is for one
// goroutine: the directory is listed once a handle, from its descriptor.
// Close it when done.
type Disk struct {
	fs   FS
	name Name
	dir  string // the directory, absolute, as resolved
	fd   int    // the directory, open
	// confined: fd was opened confined to the root, so writes may be
	// opened from it; else they go by path (FS.WriteReadQueueAttr).
	confined bool
	top      string
	// listed: a listing of the directory was tried, so the descriptor's
	// position may have moved (a fresh one needs no lseek).
	listed bool
	// sched is queue/scheduler open for reading and writing (-1: not
	// open), on a live sysfs, for a disk opened with Open:
	// the read before the write, the write and its read back go through
	// one open, where each open is two lookups under kernfs's lock.
	sched     int
	keepSched bool
}

// OpenDisk finds a disk's directory, as DeviceFacts does, and opens it.
func (s FS) OpenDisk(name string) (*Disk, error) { return s.openDisk(name, "", false) }

// Open is OpenDisk for a reader that may then write the disk's
// scheduler (the daemon's pass), by a name already checked where it
// entered: on a live sysfs, Read opens queue/scheduler for reading and
// writing and keeps it open for the write, one open where a read and a
// write take two. devpath, when not "", is the disk's directory from the
// root as its uevent names it (DEVPATH, "/devices/virtual/block/loop7"):
// opened directly, it spares the lookup of the disk's link in block/; it
// must come from the disk's uevent (openDevPath). When no directory is
// there, the disk is found by its name as OpenDisk finds it.
func (s FS) Open(name Name, devpath string) (*Disk, error) {
	if name.IsZero() {
		return nil, fmt.Errorf("%w: empty", ErrInvalidName)
	}
	return s.open(name, devpath, true)
}

func (s FS) openDisk(name, devpath string, toWrite bool) (*Disk, error) {
	n, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	return s.open(n, devpath, toWrite)
}

func (s FS) open(name Name, devpath string, toWrite bool) (*Disk, error) {
	dir, fd, confined, err := s.resolveAt(name.s, devpath)
	if err != nil {
		return nil, err
	}
	return &Disk{fs: s, name: name, dir: dir, fd: fd, confined: confined, sched: -1, keepSched: toWrite && confined && s.live}, nil
}

// Name is the disk's name.
func (disk *Disk) Name() Name { return disk.name }

// Close closes the directory.
func (disk *Disk) Close() error {
	if disk.sched >= 0 {
		unix.Close(disk.sched)
		disk.sched = -1
	}
	if disk.fd < 0 {
		return nil
	}
	err := unix.Close(disk.fd)
	disk.fd = -1
	return err
}

// readScheduler reads queue/scheduler through a descriptor open for
// reading and writing, kept for the write (keepSched). ok false: it could
// not be opened so (read-only sysfs, no privilege), and the caller reads
// it the usual way.
func (disk *Disk) readScheduler() (b []byte, err error, ok bool) {
	if disk.sched < 0 {
		fd, err := openat2(disk.fd, "queue/scheduler", unix.O_RDWR, unix.RESOLVE_BENEATH)
		if err != nil {
			disk.keepSched = false
			return nil, nil, false
		}
		disk.sched = fd
	}
	var buf [maxAttr]byte
	n, err := retryEINTR(func() (int, error) { return unix.Pread(disk.sched, buf[:], 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: "queue/scheduler", Err: err}, true
	}
	return append([]byte(nil), buf[:n]...), nil, true
}

// Exists reports whether this disk (not just one of its name) is still
// there: a removed disk's directory finds nothing any more.
func (disk *Disk) Exists() bool {
	var st unix.Stat_t
	return unix.Fstatat(disk.fd, "dev", &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// ReadQueueAttr reads queue/<attr>, as FS.ReadQueueAttr.
func (disk *Disk) ReadQueueAttr(attr string) (string, error) {
	name := disk.name.s
	rel, err := disk.attrRel(attr)
	if err != nil {
		return "", err
	}
	fd, err := disk.open(rel, unix.O_RDONLY)
	if err != nil {
		return "", attrError(name, attr, "read", err)
	}
	b, err := readFD(fd, rel)
	if err != nil {
		return "", attrError(name, attr, "read", err)
	}
	return attrValue(name, attr, "read", b)
}

// WriteQueueAttr writes queue/<attr>, as FS.WriteQueueAttr.
func (disk *Disk) WriteQueueAttr(attr, value string) error {
	_, written, err := disk.WriteReadQueueAttr(attr, value)
	if written {
		return nil // the read back is not asked for
	}
	return err
}

// WriteReadQueueAttr writes queue/<attr> and reads it back through one open
// file, as FS.WriteReadQueueAttr.
func (disk *Disk) WriteReadQueueAttr(attr, value string) (got string, written bool, err error) {
	name := disk.name.s
	rel, err := disk.attrRel(attr)
	if err != nil {
		return "", false, err
	}
	if !disk.confined {
		return disk.fs.writeReadQueueAttr(name, attr, value)
	}
	if attr == "scheduler" && disk.sched >= 0 {
		// Open since the read before this write (readScheduler). A
		// write to a sysfs attribute ignores the file's position, and a
		// read at offset 0 shows the attribute afresh
		// (fs/seq_file.c, seq_read_iter).
		b, written, err := writeReadKeep(disk.sched, rel, value)
		if err != nil {
			return "", written, attrError(name, attr, "write", err)
		}
		got, err = attrValue(name, attr, "read back", b)
		return got, true, err
	}
	fd, err := disk.open(rel, unix.O_RDWR|unix.O_TRUNC)
	if err == errNoOpenat2 {
		// No confined open relative to the directory: by the disk's
		// path from the root, confined there.
		return disk.fs.writeReadQueueAttr(name, attr, value)
	}
	if err != nil {
		return "", false, attrError(name, attr, "write", err)
	}
	b, written, err := writeRead(fd, rel, value)
	if err != nil {
		return "", written, attrError(name, attr, "write", err)
	}
	got, err = attrValue(name, attr, "read back", b)
	return got, true, err
}

func (disk *Disk) attrRel(attr string) (string, error) {
	if err := checkAttr(disk.name.s, attr); err != nil {
		return "", err
	}
	return path.Join("queue", attr), nil
}

// open opens rel below the directory. A read may follow links as the
// reader does; a write must not leave the directory (a link in a copied
// tree could lead to the live /sys), so it is opened with openat2
// RESOLVE_BENEATH.
func (disk *Disk) open(rel string, flags int) (int, error) {
	if flags&(unix.O_WRONLY|unix.O_RDWR) != 0 {
		return openat2(disk.fd, rel, flags, unix.RESOLVE_BENEATH)
	}
	return openatRetry(disk.fd, rel, flags)
}

// resolveAt finds a disk's directory and opens it: the target of its
// block/ (or class/block/) link, refusing a partition and a link that leads
// out of the root. On sysfs the link target holds no further links, so one
// readlink does what filepath.EvalSymlinks does with a stat per path
// element; every attribute is then opened relative to the directory, a
// lookup of one or two names where a full path takes eight, each one a
// turn of kernfs's lock, which hot-plug itself holds to add its files.
//
// It tries first the directory devpath (from the root), when given, whose
// last element must be name: a disk's uevent names its directory so, and
// the lookup of its block/ link (two names and the link, each a turn of
// kernfs's lock) is spared. When that cannot be opened (the disk is gone,
// or the tree has another layout), the lookup by name says what there is.
func (s FS) resolveAt(name, devpath string) (string, int, bool, error) {
	if devpath != "" {
		if dir, fd, confined, ok := s.openDevPath(name, devpath); ok {
			return dir, fd, confined, nil
		}
	}
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
		if disk := s.enclosingDisk(name); disk != "" {
			return "", -1, false, &PartitionError{Name: name, Disk: disk}
		}
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
		return "", -1, false, fmt.Errorf("%w: %s (%s is a dangling link to %s: the disk is gone, or the tree lacks its directory)", ErrNoDevice, name, rel, target)
	case err != nil:
		return "", -1, false, fmt.Errorf("%s: %w", name, err)
	}
	// block/ holds whole disks only; class/block partitions too.
	if viaClass {
		if disk, ok := partitionOf(resolved); ok {
			unix.Close(fd)
			return "", -1, false, &PartitionError{Name: name, Disk: disk}
		}
	}
	return resolved, fd, confined, nil
}

// openDevPath opens devpath, a whole disk's directory from the root as
// the disk's uevent names it (DEVPATH, with DEVTYPE=disk): below the root,
// ending in name. It is not checked further, which would cost the lookups
// it spares: the event is the kernel's (or udevd's, relaying it), and a
// disk of that name in that directory is the disk of that name; whether it
// is still the one the event was about, the caller tells from its diskseq
// (Read).
func (s FS) openDevPath(name, devpath string) (string, int, bool, bool) {
	rel := strings.TrimPrefix(path.Clean("/"+devpath), "/")
	if path.Base(rel) != name || !strings.HasPrefix(rel, "devices/") || s.dir == nil {
		return "", -1, false, false
	}
	dir := filepath.Join(s.rootAbs(), filepath.FromSlash(rel))
	if s.parents != nil && s.live {
		// One lookup below the parent, held open (parentDirs). Only on
		// sysfs, where a directory removed holds nothing any more (in a
		// copied tree, one renamed away would still show its disks).
		parent := filepath.FromSlash(path.Dir(rel))
		if pd, ok := s.parents.use(s, parent); ok {
			fd, err := openat2(pd.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, unix.RESOLVE_BENEATH)
			s.parents.done(pd)
			if err == nil {
				return dir, fd, true, true
			}
			if errors.Is(err, fs.ErrNotExist) {
				// The disk is gone, or its parent is (then the held
				// descriptor finds nothing any more): it is opened
				// afresh next time.
				s.parents.forget(parent, pd)
			}
		}
	}
	fd, confined, err := s.openDir(filepath.FromSlash(rel))
	if err != nil {
		return "", -1, false, false
	}
	return dir, fd, confined, true
}

// PartitionError is returned when a partition is named where a whole disk is
// wanted. It is an ErrNoDevice: there is no disk of that name.
type PartitionError struct {
	Name string
	Disk string // the disk it is on, "" when the tree does not say
}

func (e *PartitionError) Error() string {
	if e.Disk == "" {
		return e.Name + " is a partition, not a whole disk"
	}
	return fmt.Sprintf("%s is a partition of %s, not a whole disk: name %s", e.Name, e.Disk, e.Disk)
}

// Is makes errors.Is(err, ErrNoDevice) hold.
func (e *PartitionError) Is(target error) bool { return target == ErrNoDevice }

// partitionOf reports whether the device directory dir is a partition, and
// the disk it is on. Any one of these says so: its directory sitting inside a
// disk's (a partition's kobject is a child of its disk's in every layout; a
// disk's parent is a "block" directory, which has no dev), a "partition"
// file (block/partitions/core.c; 2.6-era kernels have none), or
// DEVTYPE=partition in its uevent (the name of part_type, which
// drivers/base/core.c dev_uevent reports).
func partitionOf(dir string) (disk string, ok bool) {
	parent := filepath.Dir(dir)
	if st, err := os.Stat(filepath.Join(parent, "dev")); err == nil && st.Mode().IsRegular() {
		return filepath.Base(parent), true
	}
	if _, err := os.Lstat(filepath.Join(dir, "partition")); err == nil {
		return "", true
	}
	if b, err := readFile(filepath.Join(dir, "uevent")); err == nil && ueventValue(b, "DEVTYPE") == "partition" {
		return "", true
	}
	return "", false
}

// enclosingDisk finds name as a partition directory inside a disk's
// directory under block/ (the layout of kernels before class/block, and of
// CONFIG_SYSFS_DEPRECATED: block/sda/sda1), and returns the disk, or "".
// Only the error path of a name not found calls it.
func (s FS) enclosingDisk(name string) string {
	disks, err := os.ReadDir(s.path("block"))
	if err != nil {
		return ""
	}
	for _, e := range disks {
		dir := s.path("block", e.Name(), name)
		if st, err := os.Stat(filepath.Join(dir, "dev")); err == nil && st.Mode().IsRegular() {
			return e.Name()
		}
	}
	return ""
}
