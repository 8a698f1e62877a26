package promtest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch counts, from outside the writer, what happens to a metrics file
// written as iosched writes it (a temporary file in the same directory,
// renamed into place): each write that lands is one rename to the file's
// name, each try one temporary file created, whether it lands or not.
// The directory must exist; the watch ends with the test.
type Watch struct {
	writes, tries atomic.Int64
}

// WatchFile starts counting the writes and tries of the file at path.
func WatchFile(t testing.TB, path string) *Watch {
	t.Helper()
	dir, base := filepath.Split(path)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Clean(dir), unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
		unix.Close(fd)
		t.Fatalf("watching %s: %v", dir, err)
	}
	// A non-blocking descriptor goes through the runtime's poller, so
	// Close unblocks the reader.
	f := os.NewFile(uintptr(fd), "inotify")
	w := &Watch{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					t.Errorf("reading inotify events: %v", err)
				}
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
				switch {
				case ev.Mask&unix.IN_MOVED_TO != 0 && name == base:
					w.writes.Add(1)
				case ev.Mask&unix.IN_CREATE != 0 && strings.HasPrefix(name, "."+base+"."):
					w.tries.Add(1)
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	t.Cleanup(func() {
		f.Close()
		wg.Wait()
	})
	return w
}

// Writes is how many times the file was written whole (renamed into
// place) since the watch started.
func (w *Watch) Writes() int { return int(w.writes.Load()) }

// Tries is how many writes of the file were begun since the watch
// started, landed or not.
func (w *Watch) Tries() int { return int(w.tries.Load()) }
