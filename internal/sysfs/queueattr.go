package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// attrRe is the shape of every attribute iosched writes: "scheduler", a
// tunable, or "iosched/<param>". No other path can be formed from it.
var attrRe = regexp.MustCompile(`^(iosched/)?[a-z0-9_]+$`)

// QueueAttrPath returns the path of queue/<attr> of a disk, after checking the
// name and the attribute, which must be Settable.
func (s FS) QueueAttrPath(name, attr string) (string, error) {
	rel, err := s.queueAttrRel(name, attr)
	if err != nil {
		return "", err
	}
	return s.path(rel), nil
}

// queueAttrRel is QueueAttrPath relative to the root.
func (s FS) queueAttrRel(name, attr string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return s.checkedAttrRel(name, attr)
}

// checkedAttrRel is queueAttrRel for a name already checked (a Name's).
func (s FS) checkedAttrRel(name, attr string) (string, error) {
	if err := checkAttr(name, attr); err != nil {
		return "", err
	}
	return filepath.Join(s.blockRel(name), "queue", filepath.FromSlash(attr)), nil
}

func checkAttr(name, attr string) error {
	if !attrRe.MatchString(attr) || !Attr(attr).Settable() {
		return fmt.Errorf("%s: attribute %q is not one iosched manages", name, attr)
	}
	return nil
}

// ReadQueueAttr reads queue/<attr> of a disk. For "scheduler" it returns the
// active scheduler's name, not the whole list.
func (s FS) ReadQueueAttr(name, attr string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return s.readQueueAttr(name, attr)
}

// readQueueAttr is ReadQueueAttr for a name already checked.
func (s FS) readQueueAttr(name, attr string) (string, error) {
	b, err := s.queueAttrDo(name, attr, "read", func(rel string) ([]byte, error) { return s.readInRoot(rel) })
	if err != nil {
		return "", err
	}
	return attrValue(name, attr, "read", b)
}

// attrValue is the value an attribute's contents hold: for "scheduler" the
// active scheduler's name, not the whole list.
func attrValue(name, attr, op string, b []byte) (string, error) {
	if Attr(attr).Kind() == KindScheduler {
		active, _, err := ParseScheduler(b)
		if err != nil {
			return "", &AttrError{Device: name, Attr: attr, Op: op, Err: err}
		}
		return active, nil
	}
	return strings.TrimSpace(string(b)), nil
}

// DiskSeq reads the disk's sequence number (see Device.DiskSeq), "" when
// the disk or the kernel has none.
func (s FS) DiskSeq(name string) string {
	if ValidateName(name) != nil {
		return ""
	}
	b, err := s.readInRoot(filepath.Join(s.blockRel(name), "diskseq"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ReadScheduler reads queue/scheduler of a disk: the active scheduler and
// those offered.
func (s FS) ReadScheduler(name string) (active string, offered []string, err error) {
	if err := ValidateName(name); err != nil {
		return "", nil, err
	}
	return s.readScheduler(name)
}

// readScheduler is ReadScheduler for a name already checked.
func (s FS) readScheduler(name string) (active string, offered []string, err error) {
	rel, err := s.checkedAttrRel(name, "scheduler")
	if err != nil {
		return "", nil, err
	}
	b, err := s.readInRoot(rel)
	if err != nil {
		return "", nil, &AttrError{Device: name, Attr: "scheduler", Op: "read", Err: unwrapPath(err)}
	}
	if active, offered, err = ParseScheduler(b); err != nil {
		return "", nil, &AttrError{Device: name, Attr: "scheduler", Op: "read", Err: err}
	}
	return active, offered, nil
}

// WriteQueueAttr writes value to queue/<attr> of a disk in one write(2)
// (see writeAttr): a missing attribute (a tunable the queue hides, a disk that
// went away) is ENOENT, never a new file.
func (s FS) WriteQueueAttr(name, attr, value string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	_, err := s.queueAttrDo(name, attr, "write", func(rel string) ([]byte, error) { return nil, s.writeInRoot(rel, []byte(value)) })
	return err
}

// WriteReadQueueAttr writes value to queue/<attr> of a disk and reads back
// what the kernel kept, through one open file: one lookup of the path where
// a write and a read take two. written reports whether the write was made;
// err is then the read's failure, if any.
func (s FS) WriteReadQueueAttr(name, attr, value string) (got string, written bool, err error) {
	if err := ValidateName(name); err != nil {
		return "", false, err
	}
	return s.writeReadQueueAttr(name, attr, value)
}

// writeReadQueueAttr is WriteReadQueueAttr for a name already checked: a
// Disk's, written by its path where it cannot be from its directory.
func (s FS) writeReadQueueAttr(name, attr, value string) (got string, written bool, err error) {
	var b []byte
	var readErr error
	_, err = s.queueAttrDo(name, attr, "write", func(rel string) ([]byte, error) {
		fd, err := s.openInRoot(rel, unix.O_RDWR|unix.O_TRUNC)
		if err != nil {
			return nil, err
		}
		b, written, err = writeRead(fd, rel, value)
		if written {
			// Never tried again by another path: it was written.
			readErr = err
			return nil, nil
		}
		return nil, err
	})
	switch {
	case err != nil:
		return "", false, err
	case readErr != nil:
		return "", true, attrError(name, attr, "write", readErr)
	}
	got, err = attrValue(name, attr, "read back", b)
	return got, true, err
}

// writeRead writes value to fd in one write(2), then reads the attribute
// again from offset 0 (sysfs shows it afresh: seq_file starts over at 0),
// and closes fd.
func writeRead(fd int, path, value string) ([]byte, bool, error) {
	defer unix.Close(fd)
	return writeReadKeep(fd, path, value)
}

// writeReadKeep is writeRead on a descriptor the caller closes.
func writeReadKeep(fd int, path, value string) ([]byte, bool, error) {
	if _, err := retryEINTR(func() (int, error) { return unix.Write(fd, []byte(value)) }); err != nil {
		return nil, false, &fs.PathError{Op: "write", Path: path, Err: err}
	}
	var buf [maxAttr]byte
	n, err := retryEINTR(func() (int, error) { return unix.Pread(fd, buf[:], 0) })
	if err != nil {
		return nil, true, &fs.PathError{Op: "read back", Path: path, Err: err}
	}
	return append([]byte(nil), buf[:n]...), true, nil
}

// queueAttrDo runs op on queue/<attr> of a disk: through the disk's own
// directory when a read found it (see pathCache), else through block/NAME.
// A remembered directory that is gone (the disk removed, or moved) is
// forgotten and block/NAME tried.
func (s FS) queueAttrDo(name, attr, verb string, op func(rel string) ([]byte, error)) ([]byte, error) {
	rel, err := s.checkedAttrRel(name, attr)
	if err != nil {
		return nil, err
	}
	if dir := s.paths.get(name); dir != "" {
		b, err := op(filepath.Join(dir, "queue", filepath.FromSlash(attr)))
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return b, attrError(name, attr, verb, err)
		}
		s.paths.forget(name)
	}
	b, err := op(rel)
	return b, attrError(name, attr, verb, err)
}

// attrError words a failed read ("read") or write: a write names the step
// that failed (open, write, close).
func attrError(name, attr, verb string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if verb == "write" && errors.As(err, &pe) {
		verb = pe.Op
	}
	return &AttrError{Device: name, Attr: attr, Op: verb, Err: unwrapPath(err)}
}

// AttrError is a failed read or write of one attribute of one disk.
type AttrError struct {
	Device string
	Attr   string
	Op     string
	Err    error
}

func (e *AttrError) Error() string {
	return fmt.Sprintf("%s: %s %s: %v", e.Device, e.Op, e.Attr, e.Err)
}

func (e *AttrError) Unwrap() error { return e.Err }

// Gone reports whether err means the disk (or the attribute) is not there:
// ENOENT or ENODEV, as the kernel answers for a disk removed mid-operation.
func Gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) || errors.Is(err, ErrNoDevice)
}
