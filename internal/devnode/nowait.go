package devnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/sysfs"
)

// probeSize is one aligned page: a valid O_DIRECT read on any logical block
// size up to 4 KiB.
const probeSize = 4096

// NoWait reports whether the driver of the disk behind devDir/name is
// NOWAIT-capable. The kernel exposes no attribute for it (no queue/nowait on
// recent kernels), but a read with RWF_NOWAIT on a file without FMODE_NOWAIT
// fails with EOPNOTSUPP before any I/O is issued (fs/read_write.c
// do_iter_readv_writev calls kiocb_set_rw_flags before ->read_iter;
// block/fops.c blkdev_open sets FMODE_NOWAIT when bdev_nowait()).
//
// The probe reads 4 KiB at the end of the disk: the flag check comes first,
// then blkdev_read_iter returns 0 for a position at or past the end without
// building a bio. So it reads no data and cannot hang on a disk whose I/O is
// stuck (a dead iSCSI or nbd server), which a read at offset 0 could.
//
// The node is opened O_RDONLY|O_NONBLOCK, and must be a block device whose
// number equals majorMinor before it is read (with O_DIRECT), so a stale or
// foreign node is never mistaken for the disk. It
// returns nil and the reason when the answer cannot be had.
//
// name is the node's name below devDir, which may hold a directory
// ("cciss/c0d0", Device.DevName), never "." or "..".
func NoWait(devDir, name, majorMinor string) (*bool, string) {
	if err := sysfs.ValidateName(name); err != nil && !sysfs.ValidNodeName(name) {
		return nil, err.Error()
	}
	if devDir == "" {
		devDir = paths.Default.Dev
	}
	p := filepath.Join(devDir, name)
	// O_NONBLOCK: a FIFO put where the node should be would hold open(2)
	// until a writer comes. O_DIRECT only once the node is known to be
	// the disk: other files refuse it with an EINVAL that says nothing of
	// what they are.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Sprintf("open %s: %v", p, err)
	}
	defer unix.Close(fd)

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Sprintf("stat %s: %v", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, fmt.Sprintf("%s is not a block device", p)
	}
	want, ok := parseDevNum(majorMinor)
	switch {
	case !ok:
		// Without the disk's number a node of the same name could be
		// another device: do not probe it.
		return nil, fmt.Sprintf("the disk's major:minor is unknown, so %s cannot be checked to be it", p)
	case uint64(st.Rdev) != want:
		return nil, fmt.Sprintf("%s is device %d:%d, not %s", p, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), majorMinor)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_DIRECT)
	}
	if err != nil {
		return nil, fmt.Sprintf("setting O_DIRECT on %s: %v", p, err)
	}

	end, err := unix.Seek(fd, 0, io.SeekEnd) // the disk's size in bytes
	if err != nil {
		return nil, fmt.Sprintf("seek %s: %v", p, err)
	}
	buf := alignedBuffer(probeSize)
	_, err = unix.Preadv2(fd, [][]byte{buf}, end, unix.RWF_NOWAIT)
	switch {
	case err == nil, errors.Is(err, unix.EAGAIN):
		// EAGAIN: the read would have blocked, which only a NOWAIT-capable
		// driver can say.
		return ptr(true), ""
	case errors.Is(err, unix.EOPNOTSUPP):
		return ptr(false), ""
	default:
		return nil, fmt.Sprintf("preadv2 RWF_NOWAIT on %s: %v", p, err)
	}
}

func ptr(b bool) *bool { return &b }

func parseDevNum(mm string) (uint64, bool) {
	maj, min, ok := strings.Cut(mm, ":")
	if !ok {
		return 0, false
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return unix.Mkdev(uint32(a), uint32(b)), true
}

// alignedBuffer returns n bytes aligned to n (a power of two), as O_DIRECT
// requires.
func alignedBuffer(n int) []byte {
	b := make([]byte, 2*n)
	off := int(uintptr(unsafe.Pointer(&b[0])) & uintptr(n-1))
	if off != 0 {
		off = n - off
	}
	return b[off : off+n]
}

// Fill sets d.NoWait (and NoWaitReason) by testing the disk's node,
// devDir/d.DevName (d.Name when DevName is not known).
func Fill(devDir string, d *sysfs.Device) {
	node := d.DevName
	if node == "" {
		node = d.Name
	}
	d.NoWait, d.NoWaitReason = NoWait(devDir, node, d.MajorMinor)
}

// Nodes says where the nodes of a sysfs tree's disks are, or why none are
// opened.
type Nodes struct {
	dir     string
	refused string
}

// NodesFor is where the nodes of the disks of the sysfs tree at sysfsRoot
// are: devDir when given (not ""); paths.Default.Dev when the tree is this
// machine's /sys. For any other tree (a copy from another machine, a fake
// one) no node is opened unless devDir is given: this machine's /dev/loop0
// has the same numbers as another machine's loop0, and would answer for it.
func NodesFor(sysfsRoot, devDir string) Nodes {
	switch {
	case devDir != "":
		return Nodes{dir: devDir}
	case sameDir(sysfsRoot, paths.Default.Sys):
		return Nodes{dir: paths.Default.Dev}
	}
	return Nodes{refused: fmt.Sprintf("the sysfs tree %s is not this machine's %s, so %s does not hold its disks' nodes", sysfsRoot, paths.Default.Sys, paths.Default.Dev)}
}

// Refused reports whether no node is opened (the tree is not this
// machine's and no directory of nodes was given).
func (n Nodes) Refused() bool { return n.refused != "" }

// Fill sets d.NoWait as the package-level Fill does, from n's directory,
// or leaves it unknown with the reason.
func (n Nodes) Fill(d *sysfs.Device) {
	if n.refused != "" {
		d.NoWait, d.NoWaitReason = nil, n.refused
		return
	}
	Fill(n.dir, d)
}

// sameDir reports whether a and b name the same directory ("" is b).
func sameDir(a, b string) bool {
	if a == "" || filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
