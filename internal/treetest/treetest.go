// Package treetest copies the fake sysfs trees under testdata/ for tests
// that change them (apply, broken links): files, directories, and links as
// links, so the copy resolves as the original does.
package treetest

import (
	"os"
	"path/filepath"
	"testing"
)

// Copy copies the tree at src into a new directory "sys" in t.TempDir() and
// returns its path.
func Copy(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "sys")
	err := filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case e.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
