package probe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/iosched/iosched/internal/looptest"
)

// gate holds reads while closed.
type gate struct {
	mu     sync.Mutex
	closed bool
	cond   *sync.Cond
	held   int // reads waiting now
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) set(closed bool) {
	g.mu.Lock()
	g.closed = closed
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gate) pass() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held++
	for g.closed {
		g.cond.Wait()
	}
	g.held--
}

func (g *gate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// gatedFile is a read-only file of zeros on a FUSE file system served by
// the test, whose reads wait while its gate is closed: the backing file of
// a loop device that stops answering, as one over a dead network server
// does, and answers again when the test says so.
type gatedFile struct {
	fs.Inode
	size int64
	gate *gate
}

var (
	_ = (fs.NodeGetattrer)((*gatedFile)(nil))
	_ = (fs.NodeOpener)((*gatedFile)(nil))
	_ = (fs.NodeReader)((*gatedFile)(nil))
)

func (f *gatedFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(f.size)
	return 0
}

func (f *gatedFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EROFS
	}
	// Direct I/O: every read of the loop device reaches the gate, none is
	// served from the page cache.
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *gatedFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.gate.pass()
	n := max(min(int64(len(dest)), f.size-off), 0)
	clear(dest[:n])
	return fuse.ReadResultData(dest[:n]), 0
}

// gatedLoop mounts a FUSE file system with one gated file of size bytes
// and binds loop device n to it. Cleanup opens the gate first, then removes
// the loop, then unmounts.
func gatedLoop(t *testing.T, n int, size int64) (*looptest.Loop, *gate) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		looptest.Missing(t, "a stuck disk is a loop device over a FUSE file: "+err.Error())
	}
	g := newGate()
	dir := t.TempDir()
	root := &fs.Inode{}
	file := &gatedFile{size: size, gate: g}
	server, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "iosched-test", Name: "iosched-test"},
		OnAdd: func(ctx context.Context) {
			root.AddChild("disk.img", root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG}), false)
		},
	})
	if err != nil {
		looptest.Missing(t, "mounting a FUSE file system: "+err.Error())
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	l := looptest.Add(t, n)
	l.BindFile(t, filepath.Join(dir, "disk.img"))
	t.Cleanup(func() { g.set(false) }) // runs before the loop's removal
	return l, g
}

// TestIntegrationStuckDisk: the disk stops answering in the middle of a
// probe. The engine gives up on its reads, and the restore, a scheduler
// switch that waits for those reads, is left to finish in the background:
// the probe ends with ErrRestorePending within a second of its budget, the
// disk stays locked and its originals recorded meanwhile. When the disk
// answers again the originals come back, the record goes and the lock is
// free. (Before, the probe waited in its restore for as long as the disk
// did not answer.)
func TestIntegrationStuckDisk(t *testing.T) {
	looptest.Require(t)
	live := liveFS(t)
	l, g := gatedLoop(t, 7304, 64<<20)
	orig := startFrom(t, live, l.Name)
	state := t.TempDir()

	o := Options{Duration: 200 * time.Millisecond, Rounds: 1, Depth: 8, Engine: EngineIOUring, Force: true}
	start := time.Now()
	type result struct {
		rep *Report
		err error
	}
	ran := make(chan result, 1)
	go func() {
		rep, err := Run(context.Background(), Target{FS: live, StateDir: state, Name: l.Name}, o, func(s string) {
			t.Log(s)
			if len(s) > 5 && s[:5] == "round" {
				g.set(true) // the first candidate is measured: the disk stops answering
			}
		})
		ran <- result{rep, err}
	}()
	var rep *Report
	var err error
	select {
	case r := <-ran:
		rep, err = r.rep, r.err
	case <-time.After(10 * time.Second):
		g.set(false)
		<-ran
		t.Fatal("the probe was still running 10 s after it started, on a disk that stopped answering (its budget is under 2 s)")
	}
	took := time.Since(start)
	if !errors.Is(err, ErrRestorePending) {
		t.Fatalf("probe of a disk that stopped answering: err = %v, want ErrRestorePending", err)
	}
	t.Log(err)
	if rep == nil || took > time.Duration(rep.BudgetS*float64(time.Second))+time.Second {
		t.Errorf("took %s: budget %v + 1s", took, rep)
	}
	if g.waiting() == 0 {
		t.Error("no read is waiting at the gate: the disk never stopped answering")
	}
	if lockFree(state, l.Name) {
		t.Error("the disk's lock was released while its restore still waits")
	}
	if _, err := os.Stat(originalsPath(state, l.Name)); err != nil {
		t.Errorf("the originals record is gone while the restore waits: %v", err)
	}

	if rep.ElapsedS <= 0 || rep.WritesAfter != rep.WritesBefore || rep.ReadsAfter <= rep.ReadsBefore {
		t.Errorf("report: elapsed %.2fs, reads %d -> %d, writes %d -> %d", rep.ElapsedS, rep.ReadsBefore, rep.ReadsAfter, rep.WritesBefore, rep.WritesAfter)
	}
	done := rep.RestoreDone()
	if done == nil {
		t.Fatal("RestoreDone is nil with the restore pending")
	}
	g.set(false) // the disk answers again
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the restore had not ended 10 s after the disk answered again")
	}
	if !lockFree(state, l.Name) {
		t.Error("the lock is held after the restore ended")
	}
	checkBack(t, live, l.Name, orig)
	if _, err := os.Stat(originalsPath(state, l.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("originals record left behind after the restore: %v", err)
	}
}
