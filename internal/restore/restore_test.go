package restore

import (
	"os"
	"path/filepath"
	"testing"
)

// Forgetting everything removes the file and its previous generation; a
// removal that fails is an error even when the other file is missing
// (before, the missing one's ENOENT made the failure count as done).
func TestOriginalsRemovalFailureReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := &Keeper{path: filepath.Join(dir, "originals.json"), prev: filepath.Join(dir, "originals.json.prev")}
	// A non-empty directory where the file is: its removal fails.
	if err := os.MkdirAll(filepath.Join(o.path, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := o.write(nil, true); err == nil {
		t.Error("removal of a non-empty directory reported as done")
	}
	if err := os.RemoveAll(o.path); err != nil {
		t.Fatal(err)
	}
	if err := o.write(nil, true); err != nil {
		t.Errorf("both files missing: %v", err)
	}
}
