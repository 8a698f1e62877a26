package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxAttr is the most a sysfs attribute can hold: one page
// (fs/sysfs/file.c, sysfs_kf_seq_show).
const maxAttr = 4096

// readNonBlocking adds O_NONBLOCK to a read-only open. Opening a FIFO for
// reading waits for a writer, perhaps for ever, in a system call no
// signal ends; a copied tree (--sysfs) can hold one where an attribute
// should be. Opened so, it returns at once and reads as empty (no writer)
// or fails with EAGAIN. sysfs attributes and regular files ignore the
// flag: kernfs reads never wait.
func readNonBlocking(flags int) int {
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		flags |= unix.O_NONBLOCK
	}
	return flags
}

// readFile reads a file of at most a page outside the disk's own
// directory (a SCSI host's proc_name, a virtio device's id, a uevent)
// with readNonBlocking's open.
func readFile(path string) ([]byte, error) {
	fd, err := openAttr(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return readFD(fd, path)
}

// readInRoot reads the attribute at rel below the root, confined to it,
// with open, one read and close: sysfs hands over the whole value in the
// first read, and os.ReadFile's extra fstat, second read and poller
// registration cost as much as the read itself when 1000 disks are read at
// once.
func (s FS) readInRoot(rel string) ([]byte, error) {
	fd, err := s.openInRoot(rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return readFD(fd, rel)
}

// readFD reads an attribute's value from fd and closes it. The page is
// read on the stack and only the value copied out: a burst of 1000 new
// disks reads thousands of attributes, and a page of garbage each kept the
// collector busy.
func readFD(fd int, path string) ([]byte, error) {
	defer unix.Close(fd)
	var buf [maxAttr]byte
	n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf[:]) })
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return append([]byte(nil), buf[:n]...), nil
}

// writeInRoot writes value to the attribute at rel below the root in one
// write(2). No O_CREAT:
// a missing attribute is ENOENT, never a new file. O_TRUNC is a no-op on
// sysfs (as for a shell's "echo >") and makes a copied tree of regular files
// behave like sysfs.
func (s FS) writeInRoot(rel string, value []byte) error {
	path := rel
	fd, err := s.openInRoot(rel, unix.O_WRONLY|unix.O_TRUNC)
	if err != nil {
		return err
	}
	_, werr := retryEINTR(func() (int, error) { return unix.Write(fd, value) })
	cerr := unix.Close(fd)
	if werr != nil {
		return &fs.PathError{Op: "write", Path: path, Err: werr}
	}
	if cerr != nil {
		return &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

func openAttr(path string, flags int) (int, error) {
	flags = readNonBlocking(flags)
	fd, err := retryEINTR(func() (int, error) { return unix.Open(path, flags|unix.O_CLOEXEC, 0) })
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// openInRoot opens rel below the root with openat2(RESOLVE_IN_ROOT): every
// link, absolute or relative, resolves inside the root, so a copied tree
// whose links point at the live /sys can never be written through.
func (s FS) openInRoot(rel string, flags int) (int, error) {
	if s.dir == nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: unix.EBADF}
	}
	fd, err := openat2(int(s.dir.Fd()), rel, flags, unix.RESOLVE_IN_ROOT)
	if err == errNoOpenat2 {
		return s.openBelow(rel, flags)
	}
	return fd, err
}

// errNoOpenat2: the kernel or a seccomp filter refuses openat2.
var errNoOpenat2 = errors.New("openat2 unavailable")

// openat2 opens rel from dirfd with openat2, its resolution confined by
// resolve (RESOLVE_IN_ROOT or RESOLVE_BENEATH; magic links never followed).
// It returns errNoOpenat2 on a kernel before 5.6 or under a seccomp filter
// that refuses the call: systemd's RestrictSUIDSGID= answers ENOSYS to every
// openat2 because it cannot inspect its mode argument, and older systemd
// answers EPERM to system calls it does not know.
func openat2(dirfd int, rel string, flags int, resolve uint64) (int, error) {
	flags = readNonBlocking(flags)
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := retryEINTR(func() (int, error) { return unix.Openat2(dirfd, rel, &how) })
		switch err {
		case nil:
			return fd, nil
		case unix.EAGAIN:
			// A concurrent rename raced the lookup (openat2(2)).
			continue
		case unix.ENOSYS, unix.EPERM:
			return -1, errNoOpenat2
		}
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
}

// openBelow is openInRoot without openat2: each link on the way (on sysfs,
// block/NAME) is read and resolved against the root by hand, and refused if
// it leads out; the last element is opened without following a link.
func (s FS) openBelow(rel string, flags int) (int, error) {
	root := s.rootAbs()
	p := root
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for i, part := range parts {
		next := filepath.Join(p, part)
		if i < len(parts)-1 {
			if t, err := os.Readlink(next); err == nil {
				if filepath.IsAbs(t) {
					next = filepath.Join(root, t)
				} else {
					next = filepath.Join(p, t)
				}
			}
			if !isBelow(next, root) {
				return -1, &fs.PathError{Op: "open", Path: rel, Err: unix.EXDEV}
			}
		}
		p = next
	}
	return openAttr(p, flags|unix.O_NOFOLLOW)
}

// readlinkInRoot reads the link at rel below the root (not following it).
func (s FS) readlinkInRoot(rel string) (string, error) {
	if s.dir == nil {
		return os.Readlink(s.path(rel))
	}
	var buf [512]byte
	n, err := unix.Readlinkat(int(s.dir.Fd()), rel, buf[:])
	switch {
	case err != nil:
		return "", &fs.PathError{Op: "readlink", Path: rel, Err: err}
	case n == len(buf):
		return os.Readlink(s.path(rel)) // longer than any sysfs path
	}
	return string(buf[:n]), nil
}

// openDir opens the directory at rel below the root: a handle to open its
// attributes from, and to list it (so not O_PATH). confined reports that
// the open was confined to the root (openat2 RESOLVE_IN_ROOT, as for
// writes): only then may writes be opened relative to it.
func (s FS) openDir(rel string) (fd int, confined bool, err error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY
	if s.dir == nil {
		fd, err := openAttr(s.path(rel), flags)
		return fd, false, err
	}
	fd, err = openat2(int(s.dir.Fd()), rel, flags, unix.RESOLVE_IN_ROOT)
	if err != errNoOpenat2 {
		return fd, err == nil, err
	}
	// Reads may go through it; writes go by path, confined by hand.
	fd, err = openatRetry(int(s.dir.Fd()), rel, flags)
	return fd, false, err
}

// openatRetry opens rel from the directory dirfd, following links.
func openatRetry(dirfd int, rel string, flags int) (int, error) {
	flags = readNonBlocking(flags)
	fd, err := retryEINTR(func() (int, error) { return unix.Openat(dirfd, rel, flags|unix.O_CLOEXEC, 0) })
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	return fd, nil
}

// ReadDiskAttr reads the attribute at rel below the disk's directory, as
// udevd's ATTR{} names it ("removable", "queue/rotational",
// "device/model"), confined to the root: what other writers' rules test,
// where DeviceFacts reads what iosched itself needs. One read of at most a
// page, opened O_NONBLOCK (a FIFO in a copied tree reads as empty instead
// of waiting for a writer). A missing attribute is fs.ErrNotExist.
func (s FS) ReadDiskAttr(name, rel string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s: %q is not a path below the disk's directory", name, rel)
	}
	rel = filepath.Join(s.blockRel(name), rel)
	fd, err := s.openInRoot(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return "", err
	}
	b, err := readFD(fd, rel)
	return string(b), err
}
