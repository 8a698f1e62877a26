package observe

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/fileio"
)

// Stat is one reading of a disk's stat file (Documentation/block/stat.rst).
// Tick fields are milliseconds. Kernels before 4.18 give the first 11
// fields, 4.18 adds the discard ones (15), 5.5 the flush ones (17); fields
// a kernel does not give are zero, later ones are ignored.
type Stat struct {
	ReadIOs, ReadMerges, ReadSectors, ReadTicks     uint64
	WriteIOs, WriteMerges, WriteSectors, WriteTicks uint64
	// InFlight is the requests in flight at the moment of the read.
	InFlight uint64
	// IOTicks is the time the disk had at least one request in flight.
	IOTicks uint64
	// TimeInQueue is the time requests spent in flight, summed over
	// requests (counted as each completes).
	TimeInQueue                                             uint64
	DiscardIOs, DiscardMerges, DiscardSectors, DiscardTicks uint64
	FlushIOs, FlushTicks                                    uint64
	// Fields is how many fields the kernel gave.
	Fields int
}

// minFields is what every kernel since 2.6 gives.
const minFields = 11

// ParseStat parses the contents of a stat file: at least 11 unsigned
// decimal fields separated by blanks. It allocates nothing but its error.
func ParseStat(b []byte) (Stat, error) {
	var v [17]uint64
	n := 0
	for i := 0; i < len(b); {
		if blank(b[i]) {
			i++
			continue
		}
		var x uint64
		start := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			d := uint64(b[i] - '0')
			if x > (^uint64(0)-d)/10 {
				return Stat{}, fmt.Errorf("field %d: %q overflows 64 bits", n+1, b[start:i+1])
			}
			x = x*10 + d
		}
		if i == start || (i < len(b) && !blank(b[i])) {
			end := i
			for end < len(b) && !blank(b[end]) {
				end++
			}
			return Stat{}, fmt.Errorf("field %d: %q is not an unsigned decimal", n+1, b[start:end])
		}
		if n < len(v) {
			v[n] = x
		}
		n++
	}
	if n < minFields {
		return Stat{}, fmt.Errorf("%d fields, want at least %d", n, minFields)
	}
	return Stat{
		ReadIOs: v[0], ReadMerges: v[1], ReadSectors: v[2], ReadTicks: v[3],
		WriteIOs: v[4], WriteMerges: v[5], WriteSectors: v[6], WriteTicks: v[7],
		InFlight: v[8], IOTicks: v[9], TimeInQueue: v[10],
		DiscardIOs: v[11], DiscardMerges: v[12], DiscardSectors: v[13], DiscardTicks: v[14],
		FlushIOs: v[15], FlushTicks: v[16], Fields: n,
	}, nil
}

func blank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

// Sample is a Stat and when it was read (with the monotonic clock).
type Sample struct {
	Stat
	At time.Time
}

// StatPath is the stat file of disk name under a sysfs root.
func StatPath(sysfsRoot, name string) string {
	return filepath.Join(sysfsRoot, "block", name, "stat")
}

// StatFile reads one disk's stat file, held open: each Read is one pread of
// it (sysfs makes the file anew at offset 0), with no path lookup and no
// allocation. A StatFile is not safe for use by several goroutines at once.
type StatFile struct {
	path string
	fd   int
	// buf holds one read: 17 fields of at most 20 digits and their
	// blanks fit with room for kernels that add more.
	buf [512]byte
}

// Open opens the stat file at path (see StatPath) for reading. It must be
// a regular file, as sysfs attributes are: anything else (a FIFO in a
// copied tree) is a *fileio.NotRegularError. The open does not wait
// (O_NONBLOCK): a FIFO opened for reading would wait for a writer, past
// every signal.
func Open(path string) (*StatFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fileio.NotRegularError{Path: path, Mode: fileMode(st.Mode)}
	}
	return &StatFile{path: path, fd: fd}, nil
}

// fileMode is the type bits of a stat(2) mode as an fs.FileMode, for the
// error's wording.
func fileMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFLNK:
		return fs.ModeSymlink
	}
	return fs.ModeIrregular
}

// Path is the stat file's path.
func (d *StatFile) Path() string { return d.path }

// Read takes a sample. Once the disk is gone, it fails with an error
// wrapping ENODEV; a disk that comes back under the same name is another
// disk, to be opened again. Every error names the file.
func (d *StatFile) Read() (Sample, error) {
	var n int
	var err error
	for {
		n, err = unix.Pread(d.fd, d.buf[:], 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	at := time.Now()
	if err != nil {
		return Sample{}, fmt.Errorf("read %s: %w", d.path, err)
	}
	if n == len(d.buf) {
		return Sample{}, fmt.Errorf("read %s: longer than %d bytes: not a disk's stat file", d.path, len(d.buf))
	}
	s, err := ParseStat(d.buf[:n])
	if err != nil {
		return Sample{}, fmt.Errorf("%s: %w", d.path, err)
	}
	return Sample{Stat: s, At: at}, nil
}

// Close closes the file.
func (d *StatFile) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}
