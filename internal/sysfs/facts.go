package sysfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

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
	factTunable0                     // first of one bit per entry of Tunables()

	// FactAll is every fact, whichever bits are in use: what list, plan
	// and explain show.
	FactAll Facts = ^Facts(0)
)

// Facts is what a disk must be read for to know a's current value: nothing
// beyond every read for the scheduler, FactIOSched for a parameter, the
// tunable's own bit for a tunable, nothing for an attribute iosched does
// not read.
func (a Attr) Facts() Facts {
	switch a.Kind() {
	case KindParam:
		return FactIOSched
	case KindTunable:
		for t, bit := range tunableBits {
			if t == a {
				return bit
			}
		}
	}
	return 0
}

// tunableBits yields each tunable iosched reads, in table order, with its
// bit: one of its own, from factTunable0 up.
func tunableBits(yield func(Attr, Facts) bool) {
	bit := factTunable0
	for _, spec := range attrSpecs {
		if spec.Kind != KindTunable || spec.Refused != "" {
			continue
		}
		if !yield(spec.Attr, bit) {
			return
		}
		bit <<= 1
	}
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
	return disk.Read(want, Ident{})
}

// Ident tells a disk from another that later takes its name: its device
// number and (Linux 5.15+) its sequence number, which is never reused
// until a reboot.
type Ident struct {
	MajorMinor string
	DiskSeq    string
}

// Read reads the disk as DeviceFacts does. When known holds a device
// number and a diskseq (the daemon has them from the disk's uevent), and
// the disk's own diskseq is that one, dev is not read: one open fewer for
// each disk of a burst. An event older than the disk (queued behind events
// that were lost) has another diskseq, and dev is read.
func (disk *Disk) Read(want Facts, known Ident) (*Device, error) {
	s, name, resolved := disk.fs, disk.name.s, disk.dir
	d := &Device{Name: name, Tunables: map[string]string{}, IOSched: map[string]string{}, Errors: []string{}}
	d.Path, _ = filepath.Rel(s.rootAbs(), resolved)
	d.Path = filepath.ToSlash(d.Path)
	s.paths.set(name, d.Path)

	r := reader{dir: resolved, fd: disk.fd, dev: d, top: disk.top, listed: disk.listed}
	defer func() { disk.top, disk.listed = r.top, r.listed }() // the directory is listed once a handle
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

	schedFile, bare := false, false
	if b, ok := r.readScheduler(disk); ok {
		schedFile = true
		active, offered, err := ParseScheduler(b)
		if err != nil {
			d.errorf("queue/%v", err)
		} else {
			d.Scheduler = &active
			d.Schedulers = offered
			bare = !strings.Contains(string(b), "[")
		}
	}
	if d.Schedulers == nil {
		d.Schedulers = []string{}
	}
	// Without a scheduler, mq/ tells a blk-mq queue whose scheduler file
	// is missing or unreadable from a bio-based one (settle).
	if want&FactHWQueues != 0 || d.Scheduler == nil {
		d.HWQueues = r.hwQueues()
	}
	for t, bit := range tunableBits {
		if want&bit == 0 {
			continue
		}
		if b, ok := r.read("queue/"+string(t), false); ok {
			d.Tunables[string(t)] = strings.TrimSpace(string(b))
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
	r.settle(d, want, schedFile, bare, s.live)
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

// reader reads attributes below one device directory, opened as fd, and
// records problems in the device's Errors.
type reader struct {
	dir string
	fd  int
	dev *Device
	// top holds the names in the directory, listed once when first needed
	// ("" until then), each between NULs ("\x00dev\x00queue\x00..."): a
	// name not there is known absent without a lookup. On a loop disk
	// classification alone asked for six absent names (device/driver, dm,
	// md, loop, ...), each a lookup under kernfs's lock. One string, not
	// a map nor a string a name: a map a disk was a large share of what a
	// burst of new disks allocated (contrib/bench/README.md).
	top string
	// listed: a listing was tried on fd, which may have moved its
	// position; a descriptor never listed is at the start.
	listed bool
}

// readScheduler reads queue/scheduler as read does, through the
// descriptor disk keeps for its write when it keeps one.
func (r *reader) readScheduler(disk *Disk) ([]byte, bool) {
	const rel = "queue/scheduler"
	if disk.keepSched && !r.absent(rel) {
		b, err, ok := disk.readScheduler()
		switch {
		case ok && err != nil:
			r.dev.errorf("%s: %v", rel, unwrapPath(err))
			return nil, false
		case ok:
			return b, true
		}
	}
	return r.read(rel, false)
}

// absent reports whether rel's first element is known not to be in the
// directory.
func (r *reader) absent(rel string) bool {
	if r.top == "" {
		names, err := r.list()
		if err != nil {
			return false
		}
		r.top = names
	}
	first, _, _ := strings.Cut(rel, "/")
	if first == "" {
		return false
	}
	i := strings.Index(r.top, first)
	for i >= 0 {
		if r.top[i-1] == 0 && r.top[i+len(first)] == 0 {
			return false
		}
		j := strings.Index(r.top[i+1:], first)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return true
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
	fd, err := openatRetry(r.fd, rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	return readFD(fd, rel)
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
func (r *reader) list() (string, error) {
	// From the start, whatever an earlier listing that failed half-way
	// left of the descriptor's position (a fresh one is there).
	if r.listed {
		if _, err := unix.Seek(r.fd, 0, 0); err != nil {
			return "", &fs.PathError{Op: "seek", Path: r.dir, Err: err}
		}
	}
	r.listed = true
	var buf [8192]byte
	names := []byte{0, '.', 0} // "." is there, and the list never ""
	for {
		n, err := retryEINTR(func() (int, error) { return unix.Getdents(r.fd, buf[:]) })
		switch {
		case err != nil:
			return "", &fs.PathError{Op: "getdents", Path: r.dir, Err: err}
		case n == 0:
			return string(names), nil
		}
		names = appendDirents(names, buf[:n])
	}
}

// appendDirents appends the names of the linux_dirent64 records in b to
// names, each followed by a NUL.
func appendDirents(names, b []byte) []byte {
	const nameOff = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			break
		}
		name := b[nameOff:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if string(name) != "." && string(name) != ".." {
			names = append(append(names, name...), 0)
		}
		b = b[reclen:]
	}
	return names
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
// a blk-mq disk; absent on a bio-based one, and in copies that left it out):
// nil when there is no mq/ or it could not be read.
func (r *reader) hwQueues() *int {
	qs, err := r.names("mq", true)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.dev.errorf("mq: %v", unwrapPath(err))
		}
		return nil
	}
	n := len(qs)
	return &n
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
