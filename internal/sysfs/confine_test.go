package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A copied tree whose links lead out of it (here into another directory
// standing for the live /sys) must neither show that disk nor let a write
// reach it.
func TestLinksOutOfTheRootAreRefused(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	outside := filepath.Join(base, "outside", "vda")
	if err := os.MkdirAll(filepath.Join(outside, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "queue", "read_ahead_kb"), []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "sys")
	if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	// One absolute link, one relative link climbing out.
	if err := os.Symlink(outside, filepath.Join(root, "block", "vda")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside/vda", filepath.Join(root, "block", "vdb")); err != nil {
		t.Fatal(err)
	}
	fs, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vda", "vdb"} {
		if d, err := fs.Device(name); err == nil || !strings.Contains(err.Error(), "out of the sysfs root") {
			t.Errorf("Device(%s) = %+v, %v; want a refusal", name, d, err)
		}
		if err := fs.WriteQueueAttr(name, "read_ahead_kb", "4096"); err == nil {
			t.Errorf("WriteQueueAttr(%s) through a link out of the root succeeded", name)
		}
		if _, err := fs.ReadQueueAttr(name, "read_ahead_kb"); err == nil {
			t.Errorf("ReadQueueAttr(%s) through a link out of the root succeeded", name)
		}
	}
	b, _ := os.ReadFile(filepath.Join(outside, "queue", "read_ahead_kb"))
	if string(b) != "128\n" {
		t.Fatalf("the file outside the root was written: %q", b)
	}
}

// Inside the root, an absolute link resolves against the root, as it would
// on the machine the tree was copied from.
func TestAbsoluteLinkResolvesInsideTheRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dev := filepath.Join(root, "devices", "virtual", "block", "loop0")
	if err := os.MkdirAll(filepath.Join(dev, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "queue", "nomerges"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/devices/virtual/block/loop0", filepath.Join(root, "block", "loop0")); err != nil {
		t.Fatal(err)
	}
	fs, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteQueueAttr("loop0", "nomerges", "2"); err != nil {
		t.Fatal(err)
	}
	if got, err := fs.ReadQueueAttr("loop0", "nomerges"); err != nil || got != "2" {
		t.Fatalf("nomerges = %q, %v", got, err)
	}
	if err := fs.WriteQueueAttr("loop0", "rq_affinity", "2"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("writing a missing attribute: %v, want ENOENT (never a new file)", err)
	}
}

// Queue attributes are opened through the directory a read found; when it
// is gone (the disk removed and created again elsewhere), through block/.
func TestRememberedDirectoryGoneFallsBackToBlock(t *testing.T) {
	t.Parallel()
	root := copyTree(t, cloudTree)
	fs := newFS(t, root)
	d, err := fs.Device("loop0")
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, d.Path)
	moved := filepath.Join(root, "devices", "virtual", "block", "loop0-moved")
	if err := os.Rename(old, moved); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "block", "loop0")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../devices/virtual/block/loop0-moved", link); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteQueueAttr("loop0", "nomerges", "2"); err != nil {
		t.Fatalf("write after the disk moved: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(moved, "queue", "nomerges")); strings.TrimSpace(string(b)) != "2" {
		t.Fatalf("nomerges in the new directory = %q", b)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("the old directory was recreated: %v", err)
	}
}
