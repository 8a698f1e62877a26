package sysfs

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// maxAttr is the most a sysfs attribute can hold: one page
// (fs/sysfs/file.c, sysfs_kf_seq_show).
const maxAttr = 4096

// readAttr reads a sysfs attribute with open, one read and close. sysfs
// hands over the whole value in the first read, and os.ReadFile's extra
// fstat, second read and poller registration cost as much as the read itself
// when 1000 disks are read at once (apply's read-back, the daemon's rescan).
func readAttr(path string) ([]byte, error) {
	fd, err := openAttr(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return readFD(fd, path)
}

// readInRoot is readAttr of a path relative to the root, confined to it.
func (s FS) readInRoot(rel string) ([]byte, error) {
	fd, err := s.openInRoot(rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return readFD(fd, rel)
}

// readFD reads an attribute's value from fd and closes it.
func readFD(fd int, path string) ([]byte, error) {
	defer unix.Close(fd)
	buf := make([]byte, maxAttr)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		return buf[:n], nil
	}
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
	var werr error
	for {
		_, werr = unix.Write(fd, value)
		if werr != unix.EINTR {
			break
		}
	}
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
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// openInRoot opens rel below the root with openat2(RESOLVE_IN_ROOT): every
// link, absolute or relative, resolves inside the root, so a copied tree
// whose links point at the live /sys can never be written through.
func (s FS) openInRoot(rel string, flags int) (int, error) {
	if s.dir == nil {
		return -1, &fs.PathError{Op: "open", Path: rel, Err: unix.EBADF}
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(int(s.dir.Fd()), rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			// EAGAIN: a concurrent rename raced the lookup (openat2(2)).
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
}
