package sysfs

import (
	"os"
	"path/filepath"
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
	t.Parallel()
	fs, disk := openCloudLoop0(t)
	d, err := disk.Read(FactAll, Ident{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fs.Device("loop0")
	if d.MajorMinor != "7:0" || d.Class != want.Class || d.Path != want.Path || *d.Scheduler != *want.Scheduler {
		t.Errorf("Facts = %+v, want what Device reads: %+v", d, want)
	}
	// A second read through the same handle answers absent names from the
	// same listing (had it listed again from where the first left the
	// descriptor, every name would have been absent).
	if again, err := disk.Read(FactAll, Ident{}); err != nil || again.Class != ClassLoop || len(again.Errors) != 0 {
		t.Errorf("second Facts = %+v, %v", again, err)
	}

	got, written, err := disk.WriteReadQueueAttr("scheduler", "mq-deadline")
	if err != nil || !written || got != "mq-deadline" {
		t.Fatalf("WriteReadQueueAttr = %q, %v, %v", got, written, err)
	}
	if v, err := fs.ReadQueueAttr("loop0", "scheduler"); err != nil || v != "mq-deadline" {
		t.Errorf("scheduler read by name after the write = %q, %v", v, err)
	}
	if err := disk.WriteQueueAttr("nomerges", "2"); err != nil {
		t.Fatal(err)
	}
	if v, err := disk.ReadQueueAttr("nomerges"); err != nil || v != "2" {
		t.Errorf("nomerges = %q, %v", v, err)
	}
	if _, _, err := disk.WriteReadQueueAttr("rq_affinity_x", "1"); err == nil {
		t.Error("an attribute iosched does not manage was written")
	}
	if disk.Name().String() != "loop0" {
		t.Errorf("the handle's name: %q, want loop0", disk.Name())
	}
	if _, err := disk.ReadQueueAttr("no_such_attr_q"); err == nil {
		t.Error("read of an unmanaged attribute accepted")
	}
	if !disk.Exists() {
		t.Error("Exists: false for a disk that is there")
	}
}

// The device number a uevent gave is taken when the event's diskseq is the
// disk's; an event from an earlier disk of that name (another diskseq) is
// not trusted, and dev is read.
func TestDiskFactsKnownIdent(t *testing.T) {
	t.Parallel()
	fs, disk := openCloudLoop0(t)
	if err := os.WriteFile(filepath.Join(fs.Root(), "devices", "virtual", "block", "loop0", "diskseq"), []byte("9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		known    Ident
		wantMM   string
		scenario string
	}{
		{Ident{MajorMinor: "7:42", DiskSeq: "9"}, "7:42", "the event's diskseq is the disk's"},
		{Ident{MajorMinor: "7:42", DiskSeq: "8"}, "7:0", "an event of an earlier disk"},
		{Ident{MajorMinor: "7:42"}, "7:0", "an event without DISKSEQ"},
		{Ident{}, "7:0", "no event"},
	} {
		d, err := disk.Read(0, tt.known)
		if err != nil {
			t.Fatal(err)
		}
		if d.MajorMinor != tt.wantMM || d.DiskSeq != "9" {
			t.Errorf("%s: %s, diskseq %s; want %s, 9 (the tree has 7:0)", tt.scenario, d.MajorMinor, d.DiskSeq, tt.wantMM)
		}
	}
}

// Once the disk's directory is gone, and another disk has taken its name
// and its place, nothing is read or written through the old handle.
func TestDiskRemovedUnderHandle(t *testing.T) {
	t.Parallel()
	fs, disk := openCloudLoop0(t)
	dir := filepath.Join(fs.Root(), "devices", "virtual", "block", "loop0")
	if err := os.Rename(dir, dir+"-old"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir + "-old"); err != nil {
		t.Fatal(err)
	}
	// The new loop0: same name, same place, scheduler none.
	if err := os.MkdirAll(filepath.Join(dir, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"dev": "7:0\n", "queue/scheduler": "[none] mq-deadline\n"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if disk.Exists() {
		t.Error("the old handle says its disk exists")
	}
	_, written, err := disk.WriteReadQueueAttr("scheduler", "mq-deadline")
	if written || !Gone(err) {
		t.Errorf("write through the old handle: written %v, %v; want a Gone error", written, err)
	}
	if _, err := disk.ReadQueueAttr("scheduler"); !Gone(err) {
		t.Errorf("read through the old handle: %v; want a Gone error", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "queue", "scheduler")); string(b) != "[none] mq-deadline\n" {
		t.Errorf("the new disk's scheduler was written through the old handle: %q", b)
	}
}

// A write through the handle stays below the disk's directory: a queue/
// that is a link out of it (a copied tree pointing at the live /sys) is
// refused.
func TestDiskWriteStaysBelowDirectory(t *testing.T) {
	t.Parallel()
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
	if _, written, err := disk.WriteReadQueueAttr("nomerges", "2"); err == nil || written {
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
	t.Parallel()
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
				disk.WriteQueueAttr("scheduler", "mq-deadline")
				disk.Close()
			}
			fs.WriteQueueAttr("loop0", "scheduler", "mq-deadline")
			if b, _ := os.ReadFile(filepath.Join(outsideDev, "queue", "scheduler")); string(b) != "[none] mq-deadline\n" {
				t.Fatalf("the file outside the root was written: %q", b)
			}
		})
	}
}

// The directory a uevent names is opened when it is the disk's; a devpath
// that names another disk, leaves the root or is not a device directory is
// not taken, and the disk is found by its name. A copied tree (not a live
// sysfs) keeps no scheduler file open: its writes truncate the file.
func TestDiskOpenAtDevPath(t *testing.T) {
	t.Parallel()
	fs := newFS(t, copyTree(t, cloudTree))
	for _, devpath := range []string{
		"/devices/virtual/block/loop0",
		"",
		"/devices/virtual/block/md0",          // another disk's
		"/devices/virtual/block/nosuch/loop0", // nothing there
		"/devices/../../../devices/virtual/block/loop0", // cleaned to the same directory
		"/sys/devices/virtual/block/loop0",              // not from the root
	} {
		disk, err := fs.Open(Name{"loop0"}, devpath)
		if err != nil {
			t.Fatalf("devpath %q: %v", devpath, err)
		}
		d, err := disk.Read(0, Ident{})
		if err != nil || d.Path != "devices/virtual/block/loop0" || d.Class != ClassLoop {
			t.Errorf("devpath %q: Read = %+v, %v", devpath, d, err)
		}
		if disk.keepSched || disk.sched >= 0 {
			t.Errorf("devpath %q: a copied tree's scheduler file kept open", devpath)
		}
		got, written, err := disk.WriteReadQueueAttr("scheduler", "mq-deadline")
		if err != nil || !written || got != "mq-deadline" {
			t.Errorf("devpath %q: WriteReadQueueAttr = %q, %v, %v", devpath, got, written, err)
		}
		disk.Close()
	}
}
