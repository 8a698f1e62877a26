package sysfs

import "fmt"

// Device is a snapshot of one whole disk as sysfs showed it when read.
// Pointer fields are nil when the kernel does not have the attribute or it
// could not be read (the reason is then in Errors).
type Device struct {
	Name string `json:"name"`
	// DevName is the disk's node below /dev as the kernel names it: the
	// name, but "cciss/c0d0" for the disk sysfs calls "cciss!c0d0" (a '/'
	// in a device name is a '!' in sysfs, lib/kobject.c).
	DevName    string `json:"devname"`
	MajorMinor string `json:"major_minor"`
	// DiskSeq is the kernel's sequence number of this disk (Linux 5.15+):
	// a disk removed and created again under the same name and number
	// gets a new one.
	DiskSeq string `json:"diskseq,omitempty"`
	// Path is the resolved device directory relative to the sysfs root,
	// e.g. "devices/pci0000:00/0000:00:02.0/virtio1/block/vda".
	Path   string `json:"path"`
	Class  Class  `json:"class"`
	Driver string `json:"driver"`
	// Transport is how a SCSI disk's host or an NVMe namespace's
	// controller reaches the storage ("virtio_scsi", "ahci", "tcp", ...);
	// "" for other classes.
	Transport string `json:"transport"`
	DMName    string `json:"dm_name,omitempty"`
	DMUUID    string `json:"dm_uuid,omitempty"`
	Multipath bool   `json:"multipath,omitempty"`

	Rotational *bool `json:"rotational"`
	Removable  *bool `json:"removable"`
	// HWQueues counts the directories under mq/: 0 on a bio-based disk,
	// nil when unknown (no mq/ in a copied tree, or not read).
	HWQueues          *int    `json:"hw_queues"`
	SizeBytes         *uint64 `json:"size_bytes"`
	LogicalBlockSize  *uint64 `json:"logical_block_size"`
	PhysicalBlockSize *uint64 `json:"physical_block_size"`
	Zoned             string  `json:"zoned,omitempty"`
	// Hidden is set on a disk the kernel keeps out of /dev: a path of an
	// NVMe multipath namespace, reached through its head (nvme1n1 for
	// nvme1c1n1). Its queue is real: the path is where requests queue.
	Hidden bool `json:"hidden,omitempty"`

	// Scheduler is the active elevator; nil on a bio-based disk, where no
	// scheduler can be set, and when queue/scheduler is missing or could not
	// be parsed (then Missing or Errors says so).
	Scheduler  *string  `json:"scheduler"`
	Schedulers []string `json:"schedulers"`
	// BioBasedBy is the evidence that the disk is bio-based (has no
	// request queue, so no scheduler), "" when there is none. A missing
	// queue/scheduler alone is not evidence: copied trees lack files.
	BioBasedBy string `json:"bio_based,omitempty"`

	// NoWait is whether the driver accepts RWF_NOWAIT I/O; nil when it was
	// not (or could not be) tested, with the reason in NoWaitReason.
	NoWait       *bool  `json:"nowait"`
	NoWaitReason string `json:"nowait_reason,omitempty"`

	Model  string `json:"model"`
	Vendor string `json:"vendor"`
	Serial string `json:"serial"`
	WWID   string `json:"wwid,omitempty"`

	// Tunables holds the current value of each of Tunables the disk has.
	Tunables map[string]string `json:"tunables"`
	// IOSched holds the files under queue/iosched/ of the active scheduler.
	IOSched map[string]string `json:"iosched"`

	// Properties are udev properties, when the caller knows them (from a
	// udev-mode uevent); sysfs does not fill them.
	Properties map[string]string `json:"properties,omitempty"`

	// Missing maps a fact read as unknown to the file that was not there
	// ("rotational": "queue/rotational", "hw_queues": "mq/"), so that
	// explain can say what was missing rather than guess.
	Missing map[string]string `json:"missing,omitempty"`

	Errors []string `json:"errors"`
}

// BioBased reports whether the disk is known to have no request queue and so
// no scheduler at all (BioBasedBy says how it is known). A disk whose
// scheduler file is missing or could not be parsed is not known to be
// bio-based: Scheduler is nil there too, and Missing or Errors says why.
func (d *Device) BioBased() bool { return d.BioBasedBy != "" }

// missing records that fact is unknown because file is not there.
func (d *Device) missing(fact, file string) {
	if d.Missing == nil {
		d.Missing = map[string]string{}
	}
	d.Missing[fact] = file
}

func (d *Device) errorf(format string, a ...any) {
	d.Errors = append(d.Errors, fmt.Sprintf(format, a...))
}

// Value is the value d shows for a (for the scheduler, the active one), and
// whether it is known.
func (d *Device) Value(a Attr) (string, bool) {
	switch a.Kind() {
	case KindScheduler:
		if d.Scheduler == nil {
			return "", false
		}
		return *d.Scheduler, true
	case KindParam:
		v, ok := d.IOSched[a.Param()]
		return v, ok
	}
	v, ok := d.Tunables[string(a)]
	return v, ok
}

// SetValue records v as a's value. A scheduler other than the one d shows
// drops the parameters: they were the old scheduler's.
func (d *Device) SetValue(a Attr, v string) {
	switch a.Kind() {
	case KindScheduler:
		if d.Scheduler == nil || *d.Scheduler != v {
			clear(d.IOSched)
		}
		d.Scheduler = &v
	case KindParam:
		d.IOSched[a.Param()] = v
	default:
		d.Tunables[string(a)] = v
	}
}

// DeleteValue records that a is not there (a tunable the queue hides, a
// parameter the scheduler does not have). The scheduler is kept.
func (d *Device) DeleteValue(a Attr) {
	switch a.Kind() {
	case KindScheduler:
	case KindParam:
		delete(d.IOSched, a.Param())
	default:
		delete(d.Tunables, string(a))
	}
}

// KeepValues drops the values of every tunable and parameter but those of
// attrs, into maps of their own (so the memory of the others is freed).
// The scheduler is kept.
func (d *Device) KeepValues(attrs []Attr) {
	tunables, params := make(map[string]string, 2), map[string]string{}
	for _, a := range attrs {
		switch a.Kind() {
		case KindParam:
			if v, ok := d.IOSched[a.Param()]; ok {
				params[a.Param()] = v
			}
		case KindTunable:
			if v, ok := d.Tunables[string(a)]; ok {
				tunables[string(a)] = v
			}
		}
	}
	d.Tunables, d.IOSched = tunables, params
}
