package looptest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// AddSlow binds loop device n to a file of size bytes (zeros) on a FUSE
// file system whose every read takes perRead and bypasses the page cache:
// a disk whose requests spend their time in the device, as a real disk's
// do. The loop driver serves one request of a device at a time
// (drivers/block/loop.c: one worker per cgroup, reading synchronously), so
// the rest wait in flight: a reader keeping d reads in flight shows d in
// flight in the disk's stat file, and the disk does about 1/perRead I/Os
// a second whatever d. Root; a machine without /dev/fuse fails or skips t
// as Missing does.
func AddSlow(t testing.TB, n int, size int64, perRead time.Duration) *Loop {
	t.Helper()
	return addOverFUSE(t, n, "a slow disk", &zeroFile{size: size, onRead: func() { time.Sleep(perRead) }})
}

// Reader keeps a number of random reads in flight on a disk, each from
// a goroutine of its own blocked in pread (O_DIRECT), so the disk sees
// exactly that many while its requests take their time in the device.
type Reader struct {
	cancel context.CancelFunc
	done   chan struct{}
	reads  atomic.Int64
	err    atomic.Pointer[error]
}

// StartReader starts depth readers of blockSize bytes (a multiple of 512)
// on /dev/name, read-only, until Stop or the end of the test.
func StartReader(t testing.TB, name string, depth, blockSize int) *Reader {
	t.Helper()
	node := "/dev/" + name
	fd, err := unix.Open(node, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", node, err)
	}
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil || size < uint64(blockSize) {
		unix.Close(fd)
		t.Fatalf("size of %s: %d, %v", node, size, err)
	}
	mem, err := unix.Mmap(-1, 0, depth*blockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("read buffers: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reader{cancel: cancel, done: make(chan struct{})}
	blocks := int64(size) / int64(blockSize)
	var wg sync.WaitGroup
	for i := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := mem[i*blockSize : (i+1)*blockSize]
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				if _, err := unix.Pread(fd, buf, rng.Int64N(blocks)*int64(blockSize)); err != nil && !errors.Is(err, unix.EINTR) {
					err = fmt.Errorf("read %s: %w", node, err)
					r.err.CompareAndSwap(nil, &err)
					return
				}
				r.reads.Add(1)
			}
		}()
	}
	go func() {
		wg.Wait()
		unix.Munmap(mem)
		unix.Close(fd)
		close(r.done)
	}()
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Reads is how many reads have completed.
func (r *Reader) Reads() int64 { return r.reads.Load() }

// Stop stops the readers, waits for their reads in flight, and fails t
// if a read failed. It is safe to call twice.
func (r *Reader) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	<-r.done
	if err := r.err.Load(); err != nil {
		t.Error(*err)
	}
}
