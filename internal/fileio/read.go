package fileio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular: the path is not a regular file (a FIFO, a device, a
// socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge: the file holds more than the reader's limit.
var ErrTooLarge = errors.New("file too large")

// NotRegularError says what the path is instead of a regular file:
// "PATH: not a regular file (a FIFO)". It is ErrNotRegular.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, Kind(e.Mode))
}

func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// TooLargeError says the file at Path holds more than Max bytes:
// "PATH: larger than MAX bytes". It is ErrTooLarge.
type TooLargeError struct {
	Path string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than %d bytes", e.Path, e.Max)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Read reads the regular file at path, at most max bytes: more is a
// *TooLargeError, anything but a regular file a *NotRegularError, and a
// missing file an error that is fs.ErrNotExist. A link to a regular file
// is followed (an administrator's configuration may be one: a ConfigMap's
// files are links, distributions link rules and profiles).
func Read(path string, max int64) ([]byte, error) { return read(path, max, 0) }

// ReadNoFollow is Read for a file iosched writes itself (in its state or
// runtime directory, replaced whole by a rename): a link there was put by
// someone else, and is refused rather than followed to whatever it names.
func ReadNoFollow(path string, max int64) ([]byte, error) { return read(path, max, unix.O_NOFOLLOW) }

func read(path string, max int64, flags int) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading waits for a writer, perhaps
	// for ever, in a system call no signal handler ends; so opened it
	// returns at once, and the check below refuses it. Reading a regular
	// file does not look at O_NONBLOCK (include/linux/fs.h iocb_flags
	// turns O_DIRECT, O_APPEND and O_DSYNC into the read's flags, not it).
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		if flags&unix.O_NOFOLLOW != 0 && errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: a symbolic link where iosched keeps a file of its own, not followed: %w", path, err)
		}
		return nil, err // *fs.PathError: "open PATH: ..."
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if fi.Size() > max {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	// The size can change after fstat (a file being appended to, a file
	// system that does not know it): read at most max+1 bytes, which
	// tells "too large" without reading the rest.
	var buf bytes.Buffer
	buf.Grow(int(min(fi.Size(), max)) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(buf.Len()) > max {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	return buf.Bytes(), nil
}

// Kind words what a file mode is, for an error: "a FIFO", "a directory".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	default:
		return m.Type().String()
	}
}

// Open is Read for a file read as a stream (a large JSON file decoded as
// it is read, never held whole): the same open, checks and errors, and a
// reader that gives at most max bytes, then a *TooLargeError if the file
// holds more. The caller closes it.
func Open(path string, max int64) (io.ReadCloser, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if fi.Size() > max {
		f.Close()
		return nil, &TooLargeError{Path: path, Max: max}
	}
	return &limited{f: f, path: path, max: max, left: max}, nil
}

// limited reads a file up to max bytes; one more is a *TooLargeError.
type limited struct {
	f         *os.File
	path      string
	max, left int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, &TooLargeError{Path: l.path, Max: l.max}
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.f.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, &TooLargeError{Path: l.path, Max: l.max}
	}
	return n, err
}

func (l *limited) Close() error { return l.f.Close() }
