package sysfs

import (
	"fmt"
	"io/fs"
	"path"

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
// Disk has FS's queue attribute methods, for this disk only (another name
// is refused), so an applier can write through it. A Disk is for one
// goroutine: the directory is listed once a handle, from its descriptor.
// Close it when done.
type Disk struct {
	fs   FS
	name string
	dir  string // the directory, absolute, as resolved
	fd   int    // the directory, open
	// confined: fd was opened confined to the root, so writes may be
	// opened from it; else they go by path (FS.WriteReadQueueAttr).
	confined bool
	top      []string
}

// OpenDisk finds a disk's directory, as DeviceFacts does, and opens it.
func (s FS) OpenDisk(name string) (*Disk, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	dir, fd, confined, err := s.resolve(name)
	if err != nil {
		return nil, err
	}
	return &Disk{fs: s, name: name, dir: dir, fd: fd, confined: confined}, nil
}

// Close closes the directory.
func (disk *Disk) Close() error {
	if disk.fd < 0 {
		return nil
	}
	err := unix.Close(disk.fd)
	disk.fd = -1
	return err
}

// Exists reports whether this disk (not just one of its name) is still
// there: a removed disk's directory finds nothing any more.
func (disk *Disk) Exists(name string) bool {
	var st unix.Stat_t
	return name == disk.name && unix.Fstatat(disk.fd, "dev", &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// ReadQueueAttr reads queue/<attr>, as FS.ReadQueueAttr.
func (disk *Disk) ReadQueueAttr(name, attr string) (string, error) {
	rel, err := disk.attrRel(name, attr)
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
func (disk *Disk) WriteQueueAttr(name, attr, value string) error {
	_, written, err := disk.WriteReadQueueAttr(name, attr, value)
	if written {
		return nil // the read back is not asked for
	}
	return err
}

// WriteReadQueueAttr writes queue/<attr> and reads it back through one open
// file, as FS.WriteReadQueueAttr.
func (disk *Disk) WriteReadQueueAttr(name, attr, value string) (got string, written bool, err error) {
	rel, err := disk.attrRel(name, attr)
	if err != nil {
		return "", false, err
	}
	if !disk.confined {
		return disk.fs.WriteReadQueueAttr(name, attr, value)
	}
	fd, err := disk.open(rel, unix.O_RDWR|unix.O_TRUNC)
	if err == errNoOpenat2 {
		// No confined open relative to the directory: by the disk's
		// path from the root, confined there.
		return disk.fs.WriteReadQueueAttr(name, attr, value)
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

func (disk *Disk) attrRel(name, attr string) (string, error) {
	if name != disk.name {
		return "", fmt.Errorf("%s: not the disk opened (%s)", name, disk.name)
	}
	if err := checkAttr(name, attr); err != nil {
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
	for {
		fd, err := unix.Openat(disk.fd, rel, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
}
