package looptest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Gate holds the reads of a gated loop device while closed.
type Gate struct {
	mu     sync.Mutex
	closed bool
	cond   *sync.Cond
	held   int // reads waiting now
}

func newGate() *Gate {
	g := &Gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Set closes the gate (reads wait) or opens it (they go on).
func (g *Gate) Set(closed bool) {
	g.mu.Lock()
	g.closed = closed
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *Gate) pass() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held++
	for g.closed {
		g.cond.Wait()
	}
	g.held--
}

// Waiting is how many reads wait at the gate now.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// zeroFile is a read-only file of zeros on a FUSE file system served by
// the test, opened for direct I/O so that every read of a loop device over
// it reaches onRead (none is served from the page cache): a gate that
// holds reads while closed (AddGated), or a fixed time a read (AddSlow).
type zeroFile struct {
	fs.Inode
	size   int64
	onRead func()
}

var (
	_ = (fs.NodeGetattrer)((*zeroFile)(nil))
	_ = (fs.NodeOpener)((*zeroFile)(nil))
	_ = (fs.NodeReader)((*zeroFile)(nil))
)

func (f *zeroFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(f.size)
	return 0
}

func (f *zeroFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *zeroFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.onRead()
	n := max(min(int64(len(dest)), f.size-off), 0)
	clear(dest[:n])
	return fuse.ReadResultData(dest[:n]), 0
}

// AddGated mounts a FUSE file system with one gated file of size bytes
// (zeros) and binds loop device n to it: a disk that stops answering when
// the gate is closed, as one over a dead network server does, and answers
// again when it opens. Cleanup opens the gate first, then removes the loop,
// then unmounts. Root; a machine without /dev/fuse fails or skips t as
// Missing does.
func AddGated(t testing.TB, n int, size int64) (*Loop, *Gate) {
	t.Helper()
	g := newGate()
	l := addOverFUSE(t, n, "a stuck disk", &zeroFile{size: size, onRead: g.pass})
	t.Cleanup(func() { g.Set(false) }) // runs before the loop's removal
	return l, g
}

// addOverFUSE mounts a FUSE file system served by the test with one file,
// file, and binds loop device n to it, read-only. Cleanup removes the
// loop, then unmounts. what says what the test needs the file for.
func addOverFUSE(t testing.TB, n int, what string, file fs.InodeEmbedder) *Loop {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Missing(t, what+" is a loop device over a FUSE file: "+err.Error())
	}
	dir := t.TempDir()
	root := &fs.Inode{}
	server, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "iosched-test", Name: "iosched-test"},
		OnAdd: func(ctx context.Context) {
			root.AddChild("disk.img", root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG}), false)
		},
	})
	if err != nil {
		Missing(t, "mounting a FUSE file system: "+err.Error())
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	l := Add(t, n)
	l.BindFile(t, filepath.Join(dir, "disk.img"))
	return l
}
