package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openCloudLoop0 opens loop0 of a fresh copy of the cloud tree.
func openCloudLoop0(t *testing.T) (FS, *Disk) {
	t.Helper()
	fs := newFS(t, copyTree(t, cloudTree))
	disk, err := fs.OpenDisk("loop0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	return fs, disk
}

// A Disk reads and writes one disk through its open directory, refuses
// another name, and writes what it then reads back.
func TestDiskReadWriteThroughDirectory(t *testing.T) {
	fs, disk := openCloudLoop0(t)
	d, err := disk.Facts(FactAll, Ident{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fs.Device("loop0")
	if d.MajorMinor != "7:0" || d.Class != want.Class || d.Path != want.Path || *d.Scheduler != *want.Scheduler {
		t.Errorf("Facts = %+v, want what Device reads: %+v", d, want)
	}
	// A second read through the same handle lists the directory from its
	// start again (not an empty listing: every name absent).
	if again, err := disk.Facts(FactAll, Ident{}); err != nil || again.Class != ClassLoop || len(again.Errors) != 0 {
		t.Errorf("second Facts = %+v, %v", again, err)
	}

	got, written, err := disk.WriteReadQueueAttr("loop0", "scheduler", "mq-deadline")
	if err != nil || !written || got != "mq-deadline" {
		t.Fatalf("WriteReadQueueAttr = %q, %v, %v", got, written, err)
	}
	if v, err := fs.ReadQueueAttr("loop0", "scheduler"); err != nil || v != "mq-deadline" {
		t.Errorf("scheduler read by name after the write = %q, %v", v, err)
	}
	if err := disk.WriteQueueAttr("loop0", "nomerges", "2"); err != nil {
		t.Fatal(err)
	}
	if v, err := disk.ReadQueueAttr("loop0", "nomerges"); err != nil || v != "2" {
		t.Errorf("nomerges = %q, %v", v, err)
	}
	if _, _, err := disk.WriteReadQueueAttr("loop0", "rq_affinity_x", "1"); err == nil {
		t.Error("an attribute iosched does not manage was written")
	}
	if err := disk.WriteQueueAttr("vda", "nomerges", "2"); err == nil || !strings.Contains(err.Error(), "not the disk opened") {
		t.Errorf("writing another disk through loop0's handle: %v", err)
	}
	if _, err := disk.ReadQueueAttr("loop0", "no_such_attr_q"); err == nil {
		t.Error("read of an unmanaged attribute accepted")
	}
	if !disk.Exists("loop0") || disk.Exists("vda") {
		t.Error("Exists: want true for its own name only")
	}
}

// The device number and diskseq a uevent gave are taken as they are.
func TestDiskFactsKnownIdent(t *testing.T) {
	_, disk := openCloudLoop0(t)
	d, err := disk.Facts(0, Ident{MajorMinor: "7:42", DiskSeq: "9"})
	if err != nil {
		t.Fatal(err)
	}
	if d.MajorMinor != "7:42" || d.DiskSeq != "9" {
		t.Errorf("ident = %s %s, want the one given (the tree says 7:0)", d.MajorMinor, d.DiskSeq)
	}
}

// Once the disk's directory is gone (the disk removed, another one perhaps
// under its name), nothing is read or written through the old handle.
func TestDiskRemovedUnderHandle(t *testing.T) {
	fs, disk := openCloudLoop0(t)
	dir := filepath.Join(fs.Root(), "devices", "virtual", "block", "loop0")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if disk.Exists("loop0") {
		t.Error("Exists after removal")
	}
	_, written, err := disk.WriteReadQueueAttr("loop0", "scheduler", "mq-deadline")
	if written || !Gone(err) {
		t.Errorf("write after removal: written %v, %v; want a Gone error", written, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed directory came back: %v", err)
	}
}

// A write through the handle stays below the disk's directory: a queue/
// that is a link out of it (a copied tree pointing at the live /sys) is
// refused.
func TestDiskWriteStaysBelowDirectory(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "nomerges"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "sys")
	dev := filepath.Join(root, "devices", "virtual", "block", "loop0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "dev"), []byte("7:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../outside", filepath.Join(dev, "queue")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../devices/virtual/block/loop0", filepath.Join(root, "block", "loop0")); err != nil {
		t.Fatal(err)
	}
	fs := newFS(t, root)
	disk, err := fs.OpenDisk("loop0")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if _, written, err := disk.WriteReadQueueAttr("loop0", "nomerges", "2"); err == nil || written {
		t.Errorf("write through a link out of the disk's directory: written %v, %v", written, err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "nomerges")); string(b) != "0\n" {
		t.Fatalf("the file outside was written: %q", b)
	}
}

// A disk's directory reached through a link out of the root (here devices/
// itself, as in a tree copied with one link too many) is not opened for
// writing: the handle is opened confined to the root, like every write.
func TestDiskDirectoryThroughLinkOutOfRoot(t *testing.T) {
	for _, target := range []string{"abs", "../outside/devices"} {
		t.Run(target, func(t *testing.T) {
			base := t.TempDir()
			outsideDev := filepath.Join(base, "outside", "devices", "virtual", "block", "loop0")
			if err := os.MkdirAll(filepath.Join(outsideDev, "queue"), 0o755); err != nil {
				t.Fatal(err)
			}
			for f, v := range map[string]string{"dev": "7:0\n", "queue/scheduler": "[none] mq-deadline\n"} {
				if err := os.WriteFile(filepath.Join(outsideDev, f), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			root := filepath.Join(base, "sys")
			if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
				t.Fatal(err)
			}
			link := target
			if target == "abs" {
				link = filepath.Join(base, "outside", "devices")
			}
			if err := os.Symlink(link, filepath.Join(root, "devices")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../devices/virtual/block/loop0", filepath.Join(root, "block", "loop0")); err != nil {
				t.Fatal(err)
			}
			fs := newFS(t, root)
			if disk, err := fs.OpenDisk("loop0"); err == nil {
				disk.WriteQueueAttr("loop0", "scheduler", "mq-deadline")
				disk.Close()
			}
			fs.WriteQueueAttr("loop0", "scheduler", "mq-deadline")
			if b, _ := os.ReadFile(filepath.Join(outsideDev, "queue", "scheduler")); string(b) != "[none] mq-deadline\n" {
				t.Fatalf("the file outside the root was written: %q", b)
			}
		})
	}
}
