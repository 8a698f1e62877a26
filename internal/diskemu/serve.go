package diskemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
)

// FileName is the name of the emulated disk's file in its mount.
const FileName = "disk.img"

// Mount serves d as FileName, a read-only file of zeros, on a FUSE file
// system mounted on dir. The caller unmounts it (Unmount) once nothing
// uses the file.
func Mount(dir string, d *Disk) (*fuse.Server, error) {
	root := &fs.Inode{}
	file := &diskFile{disk: d}
	return fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            "diskemu",
			Name:              "diskemu",
			// A loop device with direct I/O hands the file system
			// asynchronous reads; with CAP_ASYNC_DIO the kernel sends
			// each as a background request without waiting for the
			// previous one (fuse_direct_IO), else it serves them one
			// by one. Background requests beyond MaxBackground wait in
			// the kernel, so it is above any depth a loop can have.
			ExtraCapabilities:   fuse.CAP_ASYNC_DIO,
			MaxBackground:       4096,
			CongestionThreshold: 4096,
		},
		OnAdd: func(ctx context.Context) {
			root.AddChild(FileName, root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG}), false)
		},
	})
}

// diskFile is the emulated disk's file: reads take the disk's time and
// return zeros; it is opened for direct I/O so that no read is served from
// the page cache.
type diskFile struct {
	fs.Inode
	disk *Disk
}

var (
	_ = (fs.NodeGetattrer)((*diskFile)(nil))
	_ = (fs.NodeOpener)((*diskFile)(nil))
	_ = (fs.NodeReader)((*diskFile)(nil))
)

func (f *diskFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(f.disk.size)
	return 0
}

func (f *diskFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *diskFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := max(min(int64(len(dest)), f.disk.size-off), 0)
	if n > 0 {
		f.disk.Read(off, int(n))
	}
	clear(dest[:n])
	return fuse.ReadResultData(dest[:n]), 0
}

// MinLoop is the lowest loop number Attach takes: the numbers below are
// the ones a machine's own loop devices get (losetup -f), never an
// emulator's.
const MinLoop = 1000

// Attach creates loop device n over the file at path, read-only with
// direct I/O, and checks that the kernel runs it with direct I/O (without,
// the loop driver reads one request at a time and the disk's parallelism
// never shows). It fails if loop n exists: it belongs to someone else.
func Attach(n int, path string) error {
	if n < MinLoop {
		return fmt.Errorf("loop %d: the emulator uses loop numbers from %d up, never a machine's own", n, MinLoop)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/block/loop%d", n)); err == nil {
		return fmt.Errorf("loop%d exists already: it is not this emulator's", n)
	}
	if err := looptest.AddRaw(n); err != nil {
		return fmt.Errorf("LOOP_CTL_ADD %d: %w", n, err)
	}
	err := configure(n, path)
	if err != nil {
		err = errors.Join(err, Detach(n))
	}
	return err
}

func configure(n int, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	node := fmt.Sprintf("/dev/loop%d", n)
	var dev int
	for i := 0; ; i++ { // udev may not have made the node yet
		dev, err = unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil || !errors.Is(err, unix.ENOENT) || i == 200 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", node, err)
	}
	defer unix.Close(dev)
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:], path)
	if err := unix.IoctlLoopConfigure(dev, &cfg); err != nil {
		return fmt.Errorf("LOOP_CONFIGURE %s over %s: %w", node, path, err)
	}
	dio := filepath.Join("/sys/block", filepath.Base(node), "loop", "dio")
	b, err := os.ReadFile(dio)
	if err != nil {
		return err
	}
	if v, _ := strconv.Atoi(strings.TrimSpace(string(b))); v != 1 {
		return fmt.Errorf("%s: the kernel runs the loop without direct I/O over %s (%s is %q): it would read one request at a time", node, path, dio, strings.TrimSpace(string(b)))
	}
	return nil
}

// Detach unbinds loop device n from its file and removes it.
func Detach(n int) error {
	node := fmt.Sprintf("/dev/loop%d", n)
	if fd, err := unix.Open(node, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		unix.Close(fd)
	}
	if err := looptest.RemoveRaw(n); err != nil {
		return fmt.Errorf("LOOP_CTL_REMOVE %d: %w", n, err)
	}
	return nil
}
