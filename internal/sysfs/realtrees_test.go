package sysfs

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/treetest"
)

// Trees of layouts other projects captured from real machines; each has a
// README in testdata/sysfs/<tree> saying where the layout comes from.
const (
	linux26Tree    = "../../testdata/sysfs/linux26"
	rhel5Tree      = "../../testdata/sysfs/rhel5"
	ghwTree        = "../../testdata/sysfs/ghw"
	virtioSCSITree = "../../testdata/sysfs/virtioscsi"
	linux416Tree   = "../../testdata/sysfs/linux416"
	captureTree    = "../../testdata/sysfs/capture"
)

func disksOf(t *testing.T, fs FS) []string {
	t.Helper()
	names, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func wantPartition(t *testing.T, fs FS, name, disk string) {
	t.Helper()
	for _, open := range []func() error{
		func() error { _, err := fs.Device(name); return err },
		// The daemon's per-name lookups go through OpenDisk.
		func() error { d, err := fs.OpenDisk(name); d.closeIfOpen(); return err },
	} {
		err := open()
		var pe *PartitionError
		if !errors.As(err, &pe) || pe.Name != name || pe.Disk != disk || !errors.Is(err, ErrNoDevice) {
			t.Errorf("%s: %v, want a PartitionError naming disk %q (and ErrNoDevice)", name, err, disk)
			continue
		}
		if want := name + " is a partition of " + disk + ", not a whole disk: name " + disk; err.Error() != want {
			t.Errorf("%s: %q, want %q", name, err, want)
		}
	}
}

// closeIfOpen closes a Disk that should not have been opened.
func (disk *Disk) closeIfOpen() {
	if disk != nil {
		disk.Close()
	}
}

func TestLinux26(t *testing.T) {
	t.Parallel()
	fs := newFS(t, linux26Tree)
	if got := disksOf(t, fs); !slices.Equal(got, []string{"cciss!c0d0", "sda"}) {
		t.Fatalf("Disks() = %q, want cciss!c0d0 sda", got)
	}
	// No partition file: the uevent and the directory say partition.
	for _, p := range []string{"sda1", "sda2", "cciss!c0d0p1"} {
		if _, err := os.Lstat(filepath.Join(linux26Tree, "class", "block", p, "partition")); err == nil {
			t.Fatalf("fixture: %s has a partition file", p)
		}
	}
	wantPartition(t, fs, "sda1", "sda")
	wantPartition(t, fs, "sda2", "sda")
	wantPartition(t, fs, "cciss!c0d0p1", "cciss!c0d0")

	sda, err := fs.Device("sda")
	if err != nil {
		t.Fatal(err)
	}
	if fmtPtr(sda.SizeBytes) != uint64(1073741312) || sda.Class != ClassSCSI || sda.Driver != "sd" || sda.Transport != "ahci" {
		t.Errorf("sda: size %v class %s driver %q transport %q", fmtPtr(sda.SizeBytes), sda.Class, sda.Driver, sda.Transport)
	}
	// Before blk-mq and before queue/rotational: unknown, and said so.
	if sda.HWQueues != nil || sda.Rotational != nil || sda.BioBased() || fmtPtr(sda.Scheduler) != "cfq" ||
		!maps.Equal(sda.Missing, map[string]string{"hw_queues": "mq/", "rotational": "queue/rotational"}) {
		t.Errorf("sda: hwq %v rotational %v bio %q scheduler %v missing %v", fmtPtr(sda.HWQueues), fmtPtr(sda.Rotational), sda.BioBasedBy, fmtPtr(sda.Scheduler), sda.Missing)
	}
	if sda.DevName != "sda" {
		t.Errorf("sda: DevName %q", sda.DevName)
	}

	cc, err := fs.Device("cciss!c0d0")
	if err != nil {
		t.Fatal(err)
	}
	if cc.DevName != "cciss/c0d0" || cc.MajorMinor != "104:0" {
		t.Errorf("cciss!c0d0: DevName %q MajorMinor %q, want cciss/c0d0 104:0", cc.DevName, cc.MajorMinor)
	}
}

// Without DEVNAME in the uevent, the '!' still stands for '/'.
func TestDevNameWithoutUevent(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, linux26Tree)
	ue := filepath.Join(tree, "block", "cciss!c0d0", "uevent")
	if err := os.WriteFile(ue, []byte("MAJOR=104\nMINOR=0\nDEVTYPE=disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := newFS(t, tree).Device("cciss!c0d0")
	if err != nil || d.DevName != "cciss/c0d0" {
		t.Fatalf("DevName %q, %v", d.DevName, err)
	}
	// A DEVNAME that would leave the device directory is not taken.
	if err := os.WriteFile(ue, []byte("DEVNAME=../../etc/passwd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, _ := newFS(t, tree).Device("cciss!c0d0"); d.DevName != "cciss/c0d0" {
		t.Fatalf("DevName %q from a DEVNAME with ..", d.DevName)
	}
}

func TestRHEL5DeprecatedLayout(t *testing.T) {
	t.Parallel()
	fs := newFS(t, rhel5Tree)
	if got := disksOf(t, fs); !slices.Equal(got, []string{"hda"}) {
		t.Fatalf("Disks() = %q, want hda", got)
	}
	wantPartition(t, fs, "hda1", "hda")
	wantPartition(t, fs, "hda2", "hda")
	if _, err := fs.Device("hda3"); err == nil || errors.As(err, new(*PartitionError)) || !errors.Is(err, ErrNoDevice) {
		t.Errorf("hda3 (absent): %v, want a plain ErrNoDevice", err)
	}
	hda, err := fs.Device("hda")
	if err != nil || fmtPtr(hda.Scheduler) != "cfq" || fmtPtr(hda.SizeBytes) != uint64(8<<30) {
		t.Fatalf("hda: %+v, %v", hda, err)
	}
}

// partitionOf takes any one of its three signs.
func TestPartitionOf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("block/sdq/dev", "8:0\n")
	write("block/sdq/sdq1/dev", "8:1\n")          // inside its disk
	write("virtual/block/pfile/partition", "1\n") // a partition file only
	write("virtual/block/pfile/dev", "259:9\n")
	write("virtual/block/pevent/uevent", "MAJOR=259\nMINOR=8\nDEVTYPE=partition\n")
	write("virtual/block/disk/uevent", "MAJOR=259\nMINOR=7\nDEVTYPE=disk\n")
	for _, tt := range []struct {
		rel, disk string
		part      bool
	}{
		{"block/sdq/sdq1", "sdq", true},
		{"virtual/block/pfile", "", true},
		{"virtual/block/pevent", "", true},
		{"virtual/block/disk", "", false},
		{"block/sdq", "", false},
	} {
		disk, part := partitionOf(filepath.Join(dir, tt.rel))
		if disk != tt.disk || part != tt.part {
			t.Errorf("partitionOf(%s) = %q, %v; want %q, %v", tt.rel, disk, part, tt.disk, tt.part)
		}
	}
}

// A capture of the ghw kind keeps queue/rotational only: nothing is
// guessed from what is not there.
func TestGhwSnapshotMissingFiles(t *testing.T) {
	t.Parallel()
	fs := newFS(t, ghwTree)
	if got := disksOf(t, fs); !slices.Equal(got, []string{"nvme0n1", "vda"}) {
		t.Fatalf("Disks() = %q", got)
	}
	for _, name := range []string{"nvme0n1", "vda"} {
		d, err := fs.Device(name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Scheduler != nil || d.BioBased() || d.HWQueues != nil || d.Rotational == nil || len(d.Errors) != 0 ||
			!maps.Equal(d.Missing, map[string]string{"scheduler": "queue/scheduler", "hw_queues": "mq/"}) {
			t.Errorf("%s: scheduler %v bio %q hwq %v rotational %v missing %v errors %q; want scheduler and hw queues unknown, not bio-based",
				name, fmtPtr(d.Scheduler), d.BioBasedBy, fmtPtr(d.HWQueues), fmtPtr(d.Rotational), d.Missing, d.Errors)
		}
	}
	// Asked only for what the daemon reads for a scheduler rule, hw queues
	// are not read, and so not said to be missing.
	d, err := fs.DeviceFacts("vda", FactRotational)
	if err != nil || d.HWQueues != nil || d.Missing["hw_queues"] != "" || d.Missing["scheduler"] == "" {
		t.Errorf("vda, rotational only: hwq %v missing %v, %v", fmtPtr(d.HWQueues), d.Missing, err)
	}
}

func TestVirtioSCSITransport(t *testing.T) {
	t.Parallel()
	fs := newFS(t, virtioSCSITree)
	for _, w := range []struct{ name, driver, transport string }{
		{"sda", "sd", "virtio_scsi"},
		{"sdb", "sd", "virtio_scsi"}, // virtio7 has no driver link: its device ID says SCSI host
		{"sdc", "", "ahci"},          // no sd link; the AHCI function under ata1
	} {
		d, err := fs.Device(w.name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Class != ClassSCSI || d.Driver != w.driver || d.Transport != w.transport {
			t.Errorf("%s: class %s driver %q transport %q, want scsi %q %q", w.name, d.Class, d.Driver, d.Transport, w.driver, w.transport)
		}
	}

	// With neither the virtio device's driver link nor its ID, the
	// transport is unknown: never the PCI function's virtio-pci, never the
	// port's pcieport.
	tree := treetest.Copy(t, virtioSCSITree)
	v6 := filepath.Join(tree, "devices/pci0000:00/0000:00:1c.0/0000:02:00.0/virtio6")
	if err := os.Remove(filepath.Join(v6, "driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(v6, "device")); err != nil {
		t.Fatal(err)
	}
	if d, _ := newFS(t, tree).Device("sda"); d.Transport != "" {
		t.Errorf("sda without virtio6's driver and ID: transport %q, want unknown", d.Transport)
	}
	// A host hanging off the port itself (no PCI function below it with a
	// driver) gets nothing from the port.
	if got := hostController(filepath.Join(tree, "devices/pci0000:00/0000:00:1c.0"), filepath.Join(tree)); got != "" {
		t.Errorf("hostController at a PCIe port = %q, want unknown", got)
	}
}

func TestLinux416BioBased(t *testing.T) {
	t.Parallel()
	fs := newFS(t, linux416Tree)
	if got := disksOf(t, fs); !slices.Equal(got, []string{"dm-0", "sda"}) {
		t.Fatalf("Disks() = %q", got)
	}
	dm, err := fs.Device("dm-0")
	if err != nil {
		t.Fatal(err)
	}
	if dm.Scheduler != nil || len(dm.Schedulers) != 0 || !dm.BioBased() || fmtPtr(dm.HWQueues) != 0 || len(dm.Missing) != 0 || dm.DMName != "centos-root" {
		t.Errorf("dm-0: scheduler %v offered %q bio %q hwq %v missing %v dm %q; want bio-based", fmtPtr(dm.Scheduler), dm.Schedulers, dm.BioBasedBy, fmtPtr(dm.HWQueues), dm.Missing, dm.DMName)
	}
	// A legacy request queue offers schedulers and has no mq/: not
	// bio-based, hardware queues unknown.
	sda, err := fs.Device("sda")
	if err != nil {
		t.Fatal(err)
	}
	if fmtPtr(sda.Scheduler) != "deadline" || sda.BioBased() || sda.HWQueues != nil || sda.Transport != "ahci" {
		t.Errorf("sda: scheduler %v bio %q hwq %v transport %q", fmtPtr(sda.Scheduler), sda.BioBasedBy, fmtPtr(sda.HWQueues), sda.Transport)
	}
	wantPartition(t, fs, "sda1", "sda")

	// A bare "none" beside mq/ is a blk-mq queue of a kernel without
	// elevators: a scheduler none, not bio-based.
	tree := treetest.Copy(t, linux416Tree)
	if err := os.MkdirAll(filepath.Join(tree, "devices/virtual/block/dm-0/mq/0"), 0o755); err != nil {
		t.Fatal(err)
	}
	dm, _ = newFS(t, tree).Device("dm-0")
	if fmtPtr(dm.Scheduler) != "none" || dm.BioBased() || fmtPtr(dm.HWQueues) != 1 {
		t.Errorf("dm-0 with mq/0: scheduler %v bio %q hwq %v", fmtPtr(dm.Scheduler), dm.BioBasedBy, fmtPtr(dm.HWQueues))
	}
}

func TestCaptureRootHint(t *testing.T) {
	t.Parallel()
	_, err := NewFS(captureTree)
	var nested *NestedRootError
	if want := filepath.Join(captureTree, "sys"); !errors.As(err, &nested) || nested.Tree != want || nested.Root != captureTree {
		t.Fatalf("NewFS(%s) = %v, want a NestedRootError naming %s", captureTree, err, want)
	}
	if strings.Contains(err.Error(), "--sysfs") {
		t.Errorf("NewFS(%s) = %q: a flag is the CLI's advice, not the package's", captureTree, err)
	}
	fs := newFS(t, filepath.Join(captureTree, "sys"))
	if got := disksOf(t, fs); !slices.Equal(got, []string{"loop0", "vdb"}) {
		t.Fatalf("Disks() = %q", got)
	}
	_, err = fs.Device("vdb")
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "class/block/vdb is a dangling link to ../../devices/") {
		t.Errorf("vdb: %v, want a dangling class/block link said", err)
	}
	// An empty directory is no tree either, but has no hint to give.
	if _, err := NewFS(t.TempDir()); err != nil {
		t.Errorf("NewFS(empty dir) = %v", err)
	}
}

// Partitions in class/block that only their uevent or directory tells
// apart are not listed on a tree without block/.
func TestClassOnlyPartitionsByUevent(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, filepath.Join(captureTree, "sys"))
	part := filepath.Join(tree, "devices/virtual/block/loop0/loop0p1")
	if err := os.MkdirAll(part, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(part, "uevent"), []byte("MAJOR=259\nMINOR=0\nDEVTYPE=partition\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/block/loop0/loop0p1", filepath.Join(tree, "class/block/loop0p1")); err != nil {
		t.Fatal(err)
	}
	fs := newFS(t, tree)
	if got := disksOf(t, fs); slices.Contains(got, "loop0p1") {
		t.Errorf("Disks() = %q lists the partition", got)
	}
	if _, err := fs.Device("loop0p1"); !errors.As(err, new(*PartitionError)) {
		t.Errorf("loop0p1: %v, want a PartitionError", err)
	}
}

func TestLive(t *testing.T) {
	t.Parallel()
	if newFS(t, cloudTree).Live() {
		t.Error("the cloud tree is taken for a live sysfs")
	}
	if _, err := os.Stat("/sys/block"); err != nil {
		t.Skip("no /sys here")
	}
	if !newFS(t, "/sys").Live() {
		t.Error("/sys is not taken for a live sysfs")
	}
}
