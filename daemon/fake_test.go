package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/iosched/iosched/sysfs"
	"github.com/iosched/iosched/uevent"
)

// fakeTree builds a sysfs tree holding loop disks with the given names,
// each with scheduler none (mq-deadline and kyber offered) and nr_requests
// 128.
func fakeTree(t testing.TB, names ...string) sysfs.FS {
	t.Helper()
	root := t.TempDir()
	for i, n := range names {
		addFakeDisk(t, root, n, i)
	}
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func addFakeDisk(t testing.TB, root, name string, minor int) {
	t.Helper()
	dir := filepath.Join(root, "devices", "virtual", "block", name)
	for _, d := range []string{filepath.Join(dir, "queue"), filepath.Join(dir, "loop"), filepath.Join(root, "block")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"dev":                      fmt.Sprintf("7:%d\n", minor),
		"size":                     "0\n",
		"diskseq":                  fmt.Sprintf("%d\n", 100+minor),
		"queue/scheduler":          "[none] mq-deadline kyber\n",
		"queue/nr_requests":        "128\n",
		"queue/read_ahead_kb":      "128\n",
		"queue/rotational":         "0\n",
		"queue/logical_block_size": "512\n",
	}
	for rel, text := range files {
		writeFile(t, filepath.Join(dir, rel), text)
	}
	if err := os.Symlink(filepath.Join("..", "devices", "virtual", "block", name), filepath.Join(root, "block", name)); err != nil {
		t.Fatal(err)
	}
}

func removeFakeDisk(t testing.TB, fs sysfs.FS, name string) {
	t.Helper()
	os.Remove(filepath.Join(fs.Root(), "block", name))
	if err := os.RemoveAll(filepath.Join(fs.Root(), "devices", "virtual", "block", name)); err != nil {
		t.Fatal(err)
	}
}

func readFake(t testing.TB, fs sysfs.FS, name, attr string) string {
	t.Helper()
	v, err := fs.ReadQueueAttr(name, attr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fakeConn is a uevent socket fed by the test.
type fakeConn struct {
	msgs      chan fakeMsg
	closeOnce sync.Once
	closed    chan struct{}
}

type fakeMsg struct {
	b   []byte
	err error
}

var errFakeClosed = errors.New("fake socket closed")

func newFakeConn() *fakeConn {
	return &fakeConn{msgs: make(chan fakeMsg, 64), closed: make(chan struct{})}
}

func (f *fakeConn) ReadMsg() ([]byte, error) {
	select {
	case m := <-f.msgs:
		return m.b, m.err
	case <-f.closed:
		return nil, errFakeClosed
	}
}

func (f *fakeConn) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

// kernelMsg is a kernel uevent as the socket delivers it.
func kernelMsg(action, name, devtype string) []byte {
	devpath := "/devices/virtual/block/" + name
	return fmt.Appendf(nil, "%s@%s\x00ACTION=%s\x00DEVPATH=%s\x00SUBSYSTEM=block\x00DEVNAME=%s\x00DEVTYPE=%s\x00SEQNUM=1\x00",
		action, devpath, action, devpath, name, devtype)
}

// fakeDialer hands out the conns in order, and counts the dials.
type fakeDialer struct {
	mu    sync.Mutex
	conns []*fakeConn
	dials int
}

func (f *fakeDialer) dial(udev bool) (uevent.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if len(f.conns) == 0 {
		return nil, errors.New("no more fake sockets")
	}
	c := f.conns[0]
	f.conns = f.conns[1:]
	return c, nil
}

func (f *fakeDialer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// udevdMsg is a processed event as udevd broadcasts it: libudev's header
// ("libudev\0", the magic 0xfeedcafe in network byte order, the header
// size and the properties' offset and length in host order), then
// NUL-terminated properties.
func udevdMsg(action, name, devtype string, extra ...string) []byte {
	props := []byte("ACTION=" + action + "\x00DEVPATH=/devices/virtual/block/" + name + "\x00SUBSYSTEM=block\x00DEVNAME=/dev/" + name +
		"\x00DEVTYPE=" + devtype + "\x00MAJOR=7\x00MINOR=0\x00SEQNUM=9\x00ID_FOO=bar\x00")
	for _, e := range extra {
		props = append(props, e+"\x00"...)
	}
	const headerLength = 40
	h := make([]byte, headerLength)
	copy(h, "libudev\x00")
	binary.BigEndian.PutUint32(h[8:], 0xfeedcafe)
	binary.NativeEndian.PutUint32(h[12:], headerLength)
	binary.NativeEndian.PutUint32(h[16:], headerLength)
	binary.NativeEndian.PutUint32(h[20:], uint32(len(props)))
	return append(h, props...)
}
