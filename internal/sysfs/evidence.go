package sysfs

import (
	"path/filepath"
	"slices"
	"strings"
)

// Copied trees (captures kept by other projects, a tarball of a customer's
// /sys) lack files the kernel always has: a missing file there is an
// unknown fact, never a default. The live kernel is another matter: there a
// missing attribute is the kernel's own statement (it hides what a queue
// does not have). settle draws the line.

// settle decides, once the disk is classified, what its queue is known to
// be, and records the facts that were asked for but whose file is not
// there. schedFile says queue/scheduler was read, bare that it held one word
// without brackets; live that the tree is the kernel's sysfs.
//
// A disk is bio-based only on evidence:
//   - queue/scheduler is a bare "none" and there is no mq/: what every kernel
//     since blk-mq shows for a queue without it (block/elevator.c
//     elv_iosched_show, 4.x: a linear dm-0 on 4.16). A bare "none" with mq/
//     is a blk-mq queue of a kernel without elevators (before 4.11);
//   - the driver is one that is always bio-based (ClassSpec.BioBased; not
//     device-mapper: a multipath table is request-based), or the disk is an
//     NVMe multipath head (drivers/nvme/host/multipath.c);
//   - on the live sysfs, no queue/scheduler and no mq/ beside a queue/
//     directory: recent kernels hide the scheduler on a queue without blk-mq
//     (block/blk-sysfs.c blk_mq_queue_attr_visible).
//
// A copied tree without queue/scheduler (ghw's snapshots keep only
// queue/rotational) is none of these: its scheduler is unknown.
func (r *reader) settle(d *Device, want Facts, schedFile, bare, live bool) {
	d.DevName = r.devName(d.Name)
	hasMQ := d.HWQueues != nil || r.exists("mq")
	switch {
	case schedFile && bare && slices.Equal(d.Schedulers, []string{"none"}) && !hasMQ:
		d.BioBasedBy = `queue/scheduler is a bare "none" and there is no mq/`
		d.Scheduler, d.Schedulers = nil, []string{}
	case schedFile:
	case live && !hasMQ && r.exists("queue"):
		d.BioBasedBy = "the kernel shows no queue/scheduler and no mq/"
	case d.Class.Spec().BioBased:
		d.BioBasedBy = d.Class.Spec().bioBasedBy()
	case d.Class == ClassNVMe && strings.Contains(d.Path, "/nvme-subsystem/"):
		d.BioBasedBy = "an NVMe multipath head is bio-based"
	default:
		d.missing("scheduler", "queue/scheduler")
	}
	switch {
	case d.BioBased():
		zero := 0
		d.HWQueues = &zero
	case d.HWQueues == nil && want&FactHWQueues != 0 && !hasMQ:
		d.missing("hw_queues", "mq/")
	}
	if want&FactRotational != 0 && d.Rotational == nil && !r.exists("queue/rotational") {
		d.missing("rotational", "queue/rotational")
	}
	if want&FactRemovable != 0 && d.Removable == nil && !r.exists("removable") {
		d.missing("removable", "removable")
	}
	if want&FactSize != 0 && d.SizeBytes == nil && !r.exists("size") {
		d.missing("size", "size")
	}
}

// devName is the disk's node name below /dev. The kernel turns a '/' in a
// device name into '!' for sysfs (lib/kobject.c, kobject_set_name_vargs),
// so "cciss!c0d0" is /dev/cciss/c0d0; the uevent's DEVNAME says it exactly,
// and is read only for such names (one open more, and only for them).
func (r *reader) devName(name string) string {
	if !strings.Contains(name, "!") {
		return name
	}
	if b, ok := r.read("uevent", false); ok {
		if v := ueventValue(b, "DEVNAME"); v != "" && validNodeName(v) {
			return v
		}
	}
	return strings.ReplaceAll(name, "!", "/")
}

// ueventValue is the value of key in a uevent file's KEY=VALUE lines.
func ueventValue(b []byte, key string) string {
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// validNodeName accepts a node name relative to /dev: no empty, "." or ".."
// element, not absolute, no NUL.
func validNodeName(s string) bool {
	if s == "" || strings.HasPrefix(s, "/") || strings.ContainsRune(s, 0) {
		return false
	}
	for _, elem := range strings.Split(s, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return false
		}
	}
	return filepath.Clean(s) == s
}

// ValidNodeName reports whether s can name a node below the device
// directory: relative, without "." or ".." elements.
func ValidNodeName(s string) bool { return validNodeName(s) }
