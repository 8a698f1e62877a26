package sysfs

import (
	"regexp"
	"slices"
)

// Class is the kind of disk, as policies match it.
type Class string

// The classes iosched knows.
const (
	ClassVirtio  Class = "virtio"
	ClassNVMe    Class = "nvme"
	ClassSCSI    Class = "scsi"
	ClassMMC     Class = "mmc"
	ClassLoop    Class = "loop"
	ClassRAM     Class = "ram" // brd
	ClassZRAM    Class = "zram"
	ClassUBLK    Class = "ublk"
	ClassNBD     Class = "nbd"
	ClassDM      Class = "dm"
	ClassMD      Class = "md"
	ClassXen     Class = "xen"
	ClassRBD     Class = "rbd"
	ClassPMem    Class = "pmem"
	ClassUnknown Class = "unknown"
)

// ClassSpec is one class of disk: how it is recognised and what follows
// from it. Adding a class is adding an entry to classSpecs (and a disk of
// it to the testdata/sysfs/cloud fixture, and its name to the policy
// manual: TestCloudCoversEveryClass and mangen's test fail until both are
// there). Classification, the evidence that a disk is bio-based, the
// policy's class key and its manual entry, and whether tuned's disk
// plug-in takes the disk (package conflicts) all follow from the entry.
type ClassSpec struct {
	Class Class
	// Drivers are the drivers which, bound to the disk's device
	// (device/driver, or for an NVMe namespace its controller's parent),
	// make the class: the most trusted signal, as it is what the kernel
	// bound, whatever the disk is named.
	Drivers []string
	// Module names the class's block driver for a disk without a device
	// link (a virtual disk), so that Device.Driver is never blank for a
	// known class.
	Module string
	// Marker is a file or directory of the disk's sysfs directory that
	// only this class's driver creates.
	Marker string
	// Names is the kernel's naming convention for the class's disks, the
	// last resort.
	Names *regexp.Regexp
	// BioBased: the driver never has a request queue, so no scheduler: it
	// allocates its disks with blk_alloc_disk and submits bios itself
	// (drivers/block/brd.c, zram, md, pmem).
	BioBased bool
	// NoSchedByDefault: the driver asks the kernel for no scheduler when
	// the disk registers (BLK_MQ_F_NO_SCHED_BY_DEFAULT, which loop.c
	// sets), whatever its hardware queues.
	NoSchedByDefault bool
	// Tuned says whether tuned's disk plug-in takes the class's disks.
	Tuned TunedDisk
	// Doc is what the policy manual says after the class's name, if
	// anything (markdown).
	Doc string
}

// TunedDisk is whether tuned's disk plug-in handles a class's disks: it
// takes those whose parent device is SCSI, virtio, Xen or NVMe, or that
// have no parent (tuned's plugins/plugin_disk.py, _device_is_supported).
type TunedDisk uint8

const (
	// TunedByParent: it depends on the disk's parent; a virtual disk,
	// which has none, is taken.
	TunedByParent TunedDisk = iota
	// TunedTakes: the class's disks hang off a SCSI, virtio, Xen or NVMe
	// device.
	TunedTakes
	// TunedRefuses: the class's disks hang off a device of another kind
	// (an MMC card, an nd namespace).
	TunedRefuses
)

// classSpecs is the table of classes, in the order documentation shows
// them, ClassUnknown last.
var classSpecs = []ClassSpec{
	{Class: ClassVirtio, Drivers: []string{"virtio_blk"}, Names: regexp.MustCompile(`^vd[a-z]+$`), Tuned: TunedTakes},
	{Class: ClassNVMe, Drivers: []string{"nvme"}, Module: "nvme", // a multipath head, or a path of a fabrics controller
		Names: regexp.MustCompile(`^nvme\d+(c\d+)?n\d+$`), Tuned: TunedTakes},
	{Class: ClassSCSI, Drivers: []string{"sd", "sr"}, // sr: CD/DVD drives, sr0, not sd*
		Names: regexp.MustCompile(`^sd[a-z]+$|^sr\d+$`), Tuned: TunedTakes,
		Doc: "also SATA, SAS, USB and virtual SCSI disks"},
	{Class: ClassMMC, Drivers: []string{"mmcblk"}, Names: regexp.MustCompile(`^mmcblk\d+(boot\d+)?$`), Tuned: TunedRefuses},
	{Class: ClassLoop, Module: "loop", Marker: "loop", // present while a backing file is bound
		Names: regexp.MustCompile(`^loop\d+$`), NoSchedByDefault: true},
	{Class: ClassRAM, Module: "brd", Names: regexp.MustCompile(`^ram\d+$`), BioBased: true, Doc: "brd"},
	{Class: ClassZRAM, Module: "zram", Marker: "comp_algorithm", Names: regexp.MustCompile(`^zram\d+$`), BioBased: true},
	{Class: ClassUBLK, Module: "ublk_drv", Names: regexp.MustCompile(`^ublkb\d+$`)},
	{Class: ClassNBD, Module: "nbd", Names: regexp.MustCompile(`^nbd\d+$`)},
	{Class: ClassDM, Module: "device-mapper", Marker: "dm", Names: regexp.MustCompile(`^dm-\d+$`)},
	{Class: ClassMD, Module: "md", Marker: "md", Names: regexp.MustCompile(`^md\d+$|^md_`), BioBased: true},
	{Class: ClassXen, Drivers: []string{"vbd"}, // xen-blkfront registers its xenbus driver as "vbd"
		Names: regexp.MustCompile(`^xvd[a-z]+$`), Tuned: TunedTakes},
	{Class: ClassRBD, Module: "rbd", Names: regexp.MustCompile(`^rbd\d+$`)},
	{Class: ClassPMem, Drivers: []string{"nd_pmem", "pmem"}, Names: regexp.MustCompile(`^pmem\d+`), BioBased: true, Tuned: TunedRefuses},
	{Class: ClassUnknown},
}

// Classes lists every class, in the order documentation shows them.
var Classes = func() []Class {
	out := make([]Class, len(classSpecs))
	for i, s := range classSpecs {
		out[i] = s.Class
	}
	return out
}()

// KernelScheduler is the scheduler the kernel gives a disk of class c
// with hwQueues hardware queues when it registers, before anyone writes
// queue/scheduler: elevator_set_default() in block/elevator.c (6.16+)
// picks mq-deadline only for one hardware queue and a driver that did
// not ask for none (NoSchedByDefault); otherwise none. "" for a
// bio-based class, which has no scheduler. hwQueues below 1 (not known)
// is taken as one queue.
func KernelScheduler(c Class, hwQueues int) string {
	spec, _ := c.spec()
	switch {
	case spec.BioBased:
		return ""
	case spec.NoSchedByDefault || hwQueues > 1:
		return "none"
	}
	return "mq-deadline"
}

// ClassSpecs returns the table of classes, in the order documentation
// shows them.
func ClassSpecs() []ClassSpec { return slices.Clone(classSpecs) }

// IsClass reports whether s names a class.
func IsClass(s string) bool {
	_, ok := Class(s).spec()
	return ok
}

// Spec returns c's entry; a string that names no class gets ClassUnknown's.
func (c Class) Spec() ClassSpec {
	if s, ok := c.spec(); ok {
		return s
	}
	return classSpecs[len(classSpecs)-1]
}

func (c Class) spec() (ClassSpec, bool) {
	for _, s := range classSpecs {
		if s.Class == c {
			return s, true
		}
	}
	return ClassSpec{}, false
}

// bioBasedBy is the evidence a bio-based class gives: "brd disks are
// bio-based".
func (s ClassSpec) bioBasedBy() string {
	if !s.BioBased {
		return ""
	}
	name := s.Module
	if name == "" {
		name = string(s.Class)
	}
	return name + " disks are bio-based"
}

// classByDriver is the class whose Drivers has driver, ClassUnknown when
// none.
func classByDriver(driver string) (Class, bool) {
	if driver == "" {
		return ClassUnknown, false
	}
	for _, s := range classSpecs {
		if slices.Contains(s.Drivers, driver) {
			return s.Class, true
		}
	}
	return ClassUnknown, false
}
