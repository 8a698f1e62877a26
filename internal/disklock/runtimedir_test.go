package disklock

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second lock of a held directory fails naming the holder's pid (read
// from the lock file); once released, the directory can be taken again.
func TestLockExcludes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "run") // created by Lock
	unlock, err := LockRuntimeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, runtimeLockName))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want this pid", b, err)
	}
	if _, err := LockRuntimeDir(dir); err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second lock of a held directory: %v, want an error naming pid %d", err, os.Getpid())
	}
	unlock()
	unlock, err = LockRuntimeDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock()
}
