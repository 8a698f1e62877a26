package sysfs_test

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers this file uses: 7100-7119 (internal/looptest gives sysfs,
// devnode and cli 7100-7189; the three split it so they can run at once).

func realFS(t *testing.T) sysfs.FS {
	t.Helper()
	fs, err := sysfs.NewFS("")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestIntegrationLoop(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7100)
	l.Bind(t, 8<<20)
	fs := realFS(t)

	names, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, l.Name) {
		t.Fatalf("Disks() does not list %s", l.Name)
	}
	d, err := fs.Device(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	devnode.Fill("", d)
	if len(d.Errors) != 0 {
		t.Errorf("Errors = %q", d.Errors)
	}
	if d.Class != sysfs.ClassLoop || d.Driver != "loop" {
		t.Errorf("class %s driver %q, want loop loop", d.Class, d.Driver)
	}
	if d.Path != "devices/virtual/block/"+l.Name || d.MajorMinor != "7:7100" {
		t.Errorf("Path %q MajorMinor %q", d.Path, d.MajorMinor)
	}
	// loop sets BLK_MQ_F_NO_SCHED_BY_DEFAULT: the kernel gives it none.
	if d.Scheduler == nil || *d.Scheduler != "none" || !slices.Contains(d.Schedulers, "none") {
		t.Errorf("scheduler %v of %q, want none", d.Scheduler, d.Schedulers)
	}
	if d.HWQueues == nil || *d.HWQueues < 1 || d.BioBased() || len(d.Missing) != 0 {
		t.Errorf("HWQueues = %v BioBasedBy %q Missing %v, want >= 1 (blk-mq), nothing missing", d.HWQueues, d.BioBasedBy, d.Missing)
	}
	if d.SizeBytes == nil || *d.SizeBytes != 8<<20 {
		t.Errorf("SizeBytes = %v, want 8 MiB", d.SizeBytes)
	}
	if d.NoWait == nil || !*d.NoWait {
		t.Errorf("NoWait = %v (%s), want true", d.NoWait, d.NoWaitReason)
	}
	for _, tun := range []string{"read_ahead_kb", "nr_requests", "nomerges", "rq_affinity"} {
		if _, ok := d.Tunables[tun]; !ok {
			t.Errorf("tunable %s missing: %v", tun, d.Tunables)
		}
	}
	if got, err := fs.ReadQueueAttr(l.Name, "scheduler"); err != nil || got != "none" {
		t.Errorf("ReadQueueAttr = %q, %v", got, err)
	}
}

func TestIntegrationZram(t *testing.T) {
	looptest.Require(t)
	z := looptest.AddZram(t, 64<<20)
	fs := realFS(t)
	d, err := fs.Device(z.Name)
	if err != nil {
		t.Fatal(err)
	}
	devnode.Fill("", d)
	if d.Class != sysfs.ClassZRAM || d.Driver != "zram" {
		t.Errorf("class %s driver %q, want zram", d.Class, d.Driver)
	}
	// zram is bio-based: no queue/scheduler, no mq/. On the live sysfs
	// that absence is the kernel's word, and is taken as the evidence (on
	// a copy only the driver would be).
	if !fs.Live() {
		t.Fatalf("%s is not seen as a live sysfs", fs.Root())
	}
	if d.Scheduler != nil || d.BioBasedBy != "the kernel shows no queue/scheduler and no mq/" || d.HWQueues == nil || *d.HWQueues != 0 || len(d.Schedulers) != 0 || len(d.Missing) != 0 {
		t.Errorf("scheduler %v %q hwq %v bio-based by %q missing %v, want bio-based, by the live kernel", d.Scheduler, d.Schedulers, d.HWQueues, d.BioBasedBy, d.Missing)
	}
	if d.SizeBytes == nil || *d.SizeBytes != 64<<20 {
		t.Errorf("SizeBytes = %v, want 64 MiB", d.SizeBytes)
	}
	if d.NoWait == nil || *d.NoWait {
		t.Errorf("NoWait = %v (%s), want false", d.NoWait, d.NoWaitReason)
	}
	if len(d.Errors) != 0 {
		t.Errorf("Errors = %q", d.Errors)
	}
}

// TestIntegrationRemovedAfterListing removes a loop device after Disks()
// listed it and before Device() reads it.
func TestIntegrationRemovedAfterListing(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7101)
	fs := realFS(t)
	names, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, l.Name) {
		t.Fatalf("Disks() does not list %s", l.Name)
	}
	if err := looptest.RemoveRaw(l.N); err != nil {
		t.Fatal(err)
	}
	d, err := fs.Device(l.Name)
	if !errors.Is(err, sysfs.ErrNoDevice) || !sysfs.Gone(err) {
		t.Fatalf("Device(%s) after removal = %+v, %v; want ErrNoDevice", l.Name, d, err)
	}
	if fs.Exists(l.Name) {
		t.Errorf("Exists(%s) after removal", l.Name)
	}
	if _, err := os.Stat("/sys/block/" + l.Name); !os.IsNotExist(err) {
		t.Errorf("/sys/block/%s still there: %v", l.Name, err)
	}
}

// A Disk handle on a real loop: the scheduler switched and read back
// through one open file; once the loop is removed, and another created
// under its name, nothing goes through the old handle to the new disk.
func TestIntegrationDiskHandle(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7102)
	fs := realFS(t)
	disk, err := fs.OpenDisk(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	d, err := disk.Read(0, sysfs.Ident{})
	if err != nil || d.MajorMinor != "7:7102" || d.Scheduler == nil || *d.Scheduler != "none" {
		t.Fatalf("Facts = %+v, %v", d, err)
	}
	got, written, err := disk.WriteReadQueueAttr("scheduler", "mq-deadline")
	if err != nil || !written || got != "mq-deadline" {
		t.Fatalf("WriteReadQueueAttr = %q, %v, %v", got, written, err)
	}
	// Through the handle too: mq-deadline's own files are there now.
	if v, err := disk.ReadQueueAttr("iosched/fifo_batch"); err != nil || v == "" {
		t.Errorf("mq-deadline's fifo_batch through the handle = %q, %v", v, err)
	}

	if err := looptest.RemoveRaw(l.N); err != nil {
		t.Fatal(err)
	}
	again := looptest.Add(t, 7102)
	if disk.Exists() {
		t.Error("the old handle says its disk exists after removal")
	}
	_, written, err = disk.WriteReadQueueAttr("scheduler", "mq-deadline")
	if written || !sysfs.Gone(err) {
		t.Errorf("write through the removed disk's handle: written %v, %v", written, err)
	}
	if v, err := fs.ReadQueueAttr(again.Name, "scheduler"); err != nil || v != "none" {
		t.Errorf("the new %s: scheduler %q, %v; want none, untouched", again.Name, v, err)
	}
}

// A disk opened to be written, by the directory its uevent names: the
// scheduler read before the write, the write and its read back go through
// one open file, and what is read is what the kernel shows.
func TestIntegrationDiskToWrite(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7103)
	fs := realFS(t)
	disk, err := fs.Open(diskName(t, l.Name), "/devices/virtual/block/"+l.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	d, err := disk.Read(0, sysfs.Ident{})
	if err != nil || d.Path != "devices/virtual/block/"+l.Name || d.Class != sysfs.ClassLoop || d.Scheduler == nil || *d.Scheduler != "none" || len(d.Errors) != 0 {
		t.Fatalf("Read = %+v, %v", d, err)
	}
	if !slices.Contains(d.Schedulers, "mq-deadline") {
		t.Fatalf("schedulers offered %q", d.Schedulers)
	}
	got, written, err := disk.WriteReadQueueAttr("scheduler", "mq-deadline")
	if err != nil || !written || got != "mq-deadline" {
		t.Fatalf("WriteReadQueueAttr = %q, %v, %v", got, written, err)
	}
	if v, err := fs.ReadQueueAttr(l.Name, "scheduler"); err != nil || v != "mq-deadline" {
		t.Errorf("scheduler read by name after the write = %q, %v", v, err)
	}
	// A second switch through the same open file (an EBUSY retry writes
	// again): sysfs takes it whatever the file's position.
	if got, written, err := disk.WriteReadQueueAttr("scheduler", "none"); err != nil || !written || got != "none" {
		t.Errorf("second WriteReadQueueAttr = %q, %v, %v", got, written, err)
	}

	// A devpath where no disk is: the disk is found by its name.
	other, err := fs.Open(diskName(t, l.Name), "/devices/virtual/block/nosuch/"+l.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if d, err := other.Read(0, sysfs.Ident{}); err != nil || d.Path != "devices/virtual/block/"+l.Name {
		t.Errorf("Read after a wrong devpath = %+v, %v", d, err)
	}
}

// Disks opened by their uevent's directory through the parent directory
// held open: each finds its own disk, and a disk removed is not found
// through it, nor is the one created after under its name taken for it.
func TestIntegrationDiskToWriteParentHeld(t *testing.T) {
	looptest.Require(t)
	a := looptest.Add(t, 7104)
	b := looptest.Add(t, 7105)
	fs := realFS(t)
	read := func(name string) (*sysfs.Device, error) {
		disk, err := fs.Open(diskName(t, name), "/devices/virtual/block/"+name)
		if err != nil {
			return nil, err
		}
		defer disk.Close()
		return disk.Read(0, sysfs.Ident{})
	}
	for _, l := range []*looptest.Loop{a, b, a} {
		d, err := read(l.Name)
		if err != nil || d.Name != l.Name || d.MajorMinor != "7:"+l.Name[len("loop"):] {
			t.Fatalf("%s: %+v, %v", l.Name, d, err)
		}
	}
	if err := looptest.RemoveRaw(b.N); err != nil {
		t.Fatal(err)
	}
	if d, err := read(b.Name); !sysfs.Gone(err) {
		t.Errorf("%s removed: read %+v, %v; want gone", b.Name, d, err)
	}
	again := looptest.Add(t, 7105)
	d, err := read(again.Name)
	if err != nil || d.DiskSeq == "" {
		t.Fatalf("%s again: %+v, %v", again.Name, d, err)
	}
	if d, err := read(a.Name); err != nil || d.Name != a.Name {
		t.Errorf("%s after: %+v, %v", a.Name, d, err)
	}
}

// diskName is a disk name the test made, checked as every entry checks one.
func diskName(t *testing.T, s string) sysfs.Name {
	t.Helper()
	n, err := sysfs.ParseName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
