package policywatch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The policy directory removed and made again within the debounce time
// (rm -r and a restore from backup, a configuration tool that rewrites the
// directory): inotify drops the watch with the old directory, and the new
// one must be watched, so that later edits in it still reload. (Before,
// the path counted as watched still and nothing in the new directory was
// heard of again.)
func TestDirectoryRemovedAndRecreated(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "policy.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "10-base.toml"), fmt.Sprintf(rule, "v1"))
	w := follow(t, dir, "", "")

	for i := range 2 { // twice: the new watch must be renewed in turn
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "10-base.toml"), fmt.Sprintf(rule, fmt.Sprint("recreated ", i)))
		oneSignal(t, w, "the directory removed and made again")

		write(t, filepath.Join(dir, "10-base.toml"), fmt.Sprintf(rule, fmt.Sprint("edited ", i)))
		expect(t, w, 1, "an edit in the new directory")
		write(t, filepath.Join(dir, "20-new.toml"), fmt.Sprintf(rule, fmt.Sprint("new ", i)))
		expect(t, w, 1, "a file added to the new directory")
	}
}

// The policy directory replaced by a symlink to another directory, then
// that link swapped for another atomically (a ConfigMap-style swap of the
// directory itself: a new directory, a link to it renamed over the old
// one): each time the directory the path now leads to is followed, a file
// added to it too.
func TestDirectoryReplacedBySymlink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "policy.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "10-base.toml"), fmt.Sprintf(rule, "v1"))
	w := follow(t, dir, "", "")

	for i := range 3 {
		next := filepath.Join(root, fmt.Sprintf("..gen%d", i))
		if err := os.Mkdir(next, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(root, "policy.d.tmp")
		symlink(t, next, tmp)
		if i == 0 {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
		oneSignal(t, w, "the directory swapped for an empty one")

		write(t, filepath.Join(next, "10-base.toml"), fmt.Sprintf(rule, fmt.Sprint("gen ", i)))
		expect(t, w, 1, "a file added to the directory the link leads to")
		write(t, filepath.Join(dir, "10-base.toml"), fmt.Sprintf(rule, fmt.Sprint("gen ", i, " edited")))
		expect(t, w, 1, "the file edited through the link")
	}
}

// oneSignal waits for the reload signal of a change to the directory
// itself: a marker file (expect's way) written in the new directory right
// after it is made may come before the new directory is watched. The
// signal comes after the check that watches it, so expect works again
// from there; a second signal would show in the next expect's count.
func oneSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.Changed():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no reload signal in 5 s", what)
	}
}
