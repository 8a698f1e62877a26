package disklock

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/iosched/iosched/internal/paths"
	"golang.org/x/sys/unix"
)

// Locks is one process's way to the lock file at a path: every disk's lock
// is one byte of that file (at an offset from a hash of the disk's name),
// locked with an open file description lock (fcntl F_OFD_SETLK). A process
// killed with SIGKILL leaves its disks free; whether a disk is held can be
// asked (F_OFD_GETLK) without taking it, where testing an flock means
// taking it for a moment, which makes a probe starting at that moment
// refuse its disk as busy.
//
// One file for every disk, never removed, open once per Locks: a file a
// disk, created and removed around each of the daemon's writes, made a
// burst of new disks several times slower, and a descriptor a write
// would hold as many at once as disks are written at once (the process's
// descriptor table, growing, waits for an RCU grace period each time it
// doubles); see contrib/bench/README.md, "The disks' locks around the
// daemon's writes". A lock costs two fcntl calls.
//
// Locks of one open file description do not exclude each other, so a Locks
// also keeps which disks it holds: a second Lock of a held disk through the
// same Locks is busy too. Two Locks (in one process or two) exclude each
// other through the kernel. The zero value is not usable: see New.
type Locks struct {
	path string

	mu      sync.Mutex
	fd      int             // -1 until the file is opened
	held    map[string]bool // disks locked through fd
	closing bool            // Close was called: close fd once nothing is held
}

// New returns the locks kept in the file at path (paths.Default.DiskLock when empty).
// Nothing is opened until a disk is locked or asked about.
func New(path string) *Locks {
	if path == "" {
		path = paths.Default.DiskLock
	}
	return &Locks{path: path, fd: -1, held: map[string]bool{}}
}

// Path is the lock file.
func (l *Locks) Path() string { return l.path }

// BusyError is a disk whose lock someone else holds: a probe measuring it,
// or another writer of its settings.
type BusyError struct {
	Device string
	Path   string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s: its lock in %s is held: a probe is measuring it, or iosched is writing its settings", e.Device, e.Path)
}

// IsBusy reports whether err is a BusyError.
func IsBusy(err error) bool {
	var b *BusyError
	return errors.As(err, &b)
}

// Lock takes the disk's lock, or returns a *BusyError when someone holds
// it, or the error that kept the lock file from being opened or locked.
// unlock gives it back; it is never nil, and a second call does nothing.
// A probe locks its disk this way: no lock, no probe.
func (l *Locks) Lock(name string) (unlock func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.openLocked(); err != nil {
		return func() {}, err
	}
	if l.held[name] {
		return func() {}, &BusyError{Device: name, Path: l.path}
	}
	if err := unix.FcntlFlock(uintptr(l.fd), unix.F_OFD_SETLK, diskByte(name, unix.F_WRLCK)); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return func() {}, &BusyError{Device: name, Path: l.path}
		}
		return func() {}, fmt.Errorf("disk lock %s: %s: %w", l.path, name, err)
	}
	l.held[name] = true
	fd, released := l.fd, false
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if released {
			return
		}
		released = true
		_ = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, diskByte(name, unix.F_UNLCK))
		delete(l.held, name)
		l.closeIfDoneLocked()
	}, nil
}

// LockToWrite is Lock for a writer of the disk's settings: while it holds
// the lock no probe starts on the disk, so the writer's check and its
// writes are one step (two scheduler switches at once on one queue can
// crash the kernel, and a probe would put its originals back over the
// writes). A *BusyError means the writer must leave the disk alone for now.
// Where no lock can be made at all (a file system that is read-only, a
// directory that is not ours to write or is not one: an unprivileged run
// against a copied sysfs tree), no probe can take one either: unlock is
// then a no-op, err nil, and the writer goes on. Any other failure (out of
// descriptors, say) is returned: the writer leaves the disk for later.
func (l *Locks) LockToWrite(name string) (unlock func(), err error) {
	unlock, err = l.Lock(name)
	if err != nil && unavailable(err) {
		return func() {}, nil
	}
	return unlock, err
}

// unavailable: the lock file cannot be made or opened for writing here
// (a busy disk is a BusyError, never one of these).
func unavailable(err error) bool {
	for _, e := range []error{unix.ENOTDIR, unix.EROFS, unix.EACCES, unix.EPERM, unix.EEXIST} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Held reports whether someone holds the disk's lock now: another Locks
// (another process, or a probe of this one with its own), or a Lock of
// this one not yet given back. A lock file that does not exist, or cannot
// be opened, holds nothing.
func (l *Locks) Held(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[name] {
		return true
	}
	fd := l.fd
	if fd < 0 {
		// Asking must not create the file: open it read-only for the
		// question alone.
		var err error
		fd, err = unix.Open(l.path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
	}
	lk := diskByte(name, unix.F_WRLCK)
	if unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, lk) != nil {
		return false
	}
	return lk.Type != unix.F_UNLCK
}

// Close lets the lock file go once every disk locked through l is unlocked
// (closing it would drop their locks, among them those handed to a write
// still waiting on its disk).
func (l *Locks) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	l.closeIfDoneLocked()
}

func (l *Locks) closeIfDoneLocked() {
	if l.closing && len(l.held) == 0 && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// openLocked opens the lock file, making it and its directory when
// missing. Called with l.mu held.
func (l *Locks) openLocked() error {
	if l.fd >= 0 {
		return nil
	}
	if l.closing {
		return fmt.Errorf("disk lock %s: closed", l.path)
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return fmt.Errorf("disk lock: %w", err)
	}
	fd, err := unix.Open(l.path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Open(l.path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	}
	if err != nil {
		return fmt.Errorf("disk lock %s: %w", l.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = unix.EINVAL
		}
		return fmt.Errorf("disk lock %s: not a regular file: %w", l.path, err)
	}
	l.fd = fd
	return nil
}

// diskByte is the disk's byte of the lock file: an offset from a 62-bit
// hash of its name (two names of disks present at once sharing one would
// make one wait for the other, no worse).
func diskByte(name string, typ int16) *unix.Flock_t {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: int64(h.Sum64() >> 2), Len: 1}
}
