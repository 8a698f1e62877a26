package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/uevent"
	"github.com/iosched/iosched/internal/ueventtest"
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

// fakeDialer is a ueventtest.Dialer as a uevent.Dialer (its dial).
type fakeDialer struct{ *ueventtest.Dialer }

func newFakeDialer(conns ...*ueventtest.Conn) *fakeDialer {
	return &fakeDialer{ueventtest.NewDialer(conns...)}
}

func (f *fakeDialer) dial(bool) (uevent.Conn, error) {
	c, err := f.Next()
	if err != nil {
		return nil, err
	}
	return c, nil
}
