package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/iosched/iosched/sysfs"
)

// A reconcile of 1000 disks must take well under 50 ms on a small VM, and
// most of that is opening sysfs files. These two helpers do what sysfs.FS
// does with fewer system calls: one open(2) of the resolved device path (no
// symlink walk, no Lstat of block/NAME first), one read(2), one close(2),
// where os.ReadFile adds an fstat(2), a second read(2) and an epoll_ctl(2).
// Measured here on 1000 loop devices: 66 ms a reconcile with sysfs.FS, see
// TestIntegrationRescanSpeed for the figure with these.

// readAttr reads queue/<attr> of dev through its resolved directory.
func readAttr(root string, dev *sysfs.Device, attr string) (string, error) {
	if !managedAttr(attr) {
		return "", fmt.Errorf("%s: attribute %q is not one iosched manages", dev.Name, attr)
	}
	dir := dev.Path
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	p := filepath.Join(dir, "queue", attr)
	var buf [4096]byte // sysfs attributes are at most one page
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", &sysfs.AttrError{Device: dev.Name, Attr: attr, Op: "read", Err: err}
	}
	n, err := readRetry(fd, buf[:])
	syscall.Close(fd)
	if err != nil {
		return "", &sysfs.AttrError{Device: dev.Name, Attr: attr, Op: "read", Err: err}
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, b)
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// managedAttr is sysfs.QueueAttrPath's check: the scheduler, a tunable, or a
// scheduler parameter, never a path.
func managedAttr(attr string) bool {
	if param, ok := strings.CutPrefix(attr, "iosched/"); ok {
		return param != "" && !strings.ContainsAny(param, "/\x00") && param != "." && param != ".."
	}
	return attr == "scheduler" || sysfs.IsTunable(attr)
}

// listDisks lists whole disks: block/ holds only those, one getdents(2) and
// no stat per entry. Trees without block/ fall back to sysfs.FS.Disks.
func listDisks(fs sysfs.FS) ([]string, error) {
	f, err := os.Open(filepath.Join(fs.Root(), "block"))
	if err != nil {
		return fs.Disks()
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fs.Disks()
	}
	out := names[:0]
	for _, n := range names {
		if sysfs.ValidateName(n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}
