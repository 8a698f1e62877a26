package sysfs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// Classes lists every class, in the order documentation shows them.
var Classes = []Class{
	ClassVirtio, ClassNVMe, ClassSCSI, ClassMMC, ClassLoop, ClassRAM, ClassZRAM,
	ClassUBLK, ClassNBD, ClassDM, ClassMD, ClassXen, ClassRBD, ClassPMem, ClassUnknown,
}

// IsClass reports whether s names a class.
func IsClass(s string) bool {
	for _, c := range Classes {
		if string(c) == s {
			return true
		}
	}
	return false
}

// classByDriver maps the driver bound to the disk's device (or, for an NVMe
// namespace, to its controller's device) to a class. The driver is the most
// reliable signal: it is what the kernel bound, whatever the disk is named.
var classByDriver = map[string]Class{
	"virtio_blk": ClassVirtio,
	"sd":         ClassSCSI,
	"nvme":       ClassNVMe,
	"mmcblk":     ClassMMC,
	"vbd":        ClassXen, // xen-blkfront registers its xenbus driver as "vbd"
	"nd_pmem":    ClassPMem,
	"pmem":       ClassPMem,
}

// driverByClass names the block driver module of disks that have no device
// link (virtual disks), so that DRIVER is never blank for a known class.
var driverByClass = map[Class]string{
	ClassLoop: "loop",
	ClassRAM:  "brd",
	ClassZRAM: "zram",
	ClassUBLK: "ublk_drv",
	ClassNBD:  "nbd",
	ClassDM:   "device-mapper",
	ClassMD:   "md",
	ClassRBD:  "rbd",
	ClassNVMe: "nvme", // a multipath head under nvme-subsystem
}

// classByName is the last resort: the kernel's naming conventions.
var classByName = []struct {
	re    *regexp.Regexp
	class Class
}{
	{regexp.MustCompile(`^vd[a-z]+$`), ClassVirtio},
	{regexp.MustCompile(`^nvme\d+(c\d+)?n\d+$`), ClassNVMe},
	{regexp.MustCompile(`^(sd|sr)[a-z]+$`), ClassSCSI},
	{regexp.MustCompile(`^mmcblk\d+$`), ClassMMC},
	{regexp.MustCompile(`^loop\d+$`), ClassLoop},
	{regexp.MustCompile(`^ram\d+$`), ClassRAM},
	{regexp.MustCompile(`^zram\d+$`), ClassZRAM},
	{regexp.MustCompile(`^ublkb\d+$`), ClassUBLK},
	{regexp.MustCompile(`^nbd\d+$`), ClassNBD},
	{regexp.MustCompile(`^dm-\d+$`), ClassDM},
	{regexp.MustCompile(`^md\d+$|^md_`), ClassMD},
	{regexp.MustCompile(`^xvd[a-z]+$`), ClassXen},
	{regexp.MustCompile(`^rbd\d+$`), ClassRBD},
	{regexp.MustCompile(`^pmem\d+`), ClassPMem},
}

// classify fills Class, Driver, Transport and the dm fields: from the driver
// link first, then the resolved path and driver-specific directories, and the
// name only when nothing else says.
func classify(s FS, d *Device, resolved string, r *reader) {
	d.Driver = boundDriver(resolved)
	d.Class = ClassUnknown
	if c, ok := classByDriver[d.Driver]; ok {
		d.Class = c
	} else {
		d.Class = classByLayout(d.Name, resolved)
	}
	if d.Driver == "" {
		d.Driver = driverByClass[d.Class]
	}
	switch d.Class {
	case ClassSCSI:
		d.Transport = scsiTransport(s, resolved)
	case ClassDM:
		d.DMName = r.text("dm/name")
		d.DMUUID = r.text("dm/uuid")
		d.Multipath = strings.HasPrefix(d.DMUUID, "mpath-")
	}
}

// boundDriver is the name of the driver bound to the disk's device: the
// device itself (virtio, SCSI, mmc), or its parent (an NVMe namespace's
// device is the controller, whose device is the PCI function).
func boundDriver(resolved string) string {
	for _, rel := range []string{"device/driver", "device/device/driver"} {
		if target, err := os.Readlink(filepath.Join(resolved, rel)); err == nil {
			return filepath.Base(target)
		}
	}
	return ""
}

func classByLayout(name, resolved string) Class {
	has := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(resolved, rel))
		return err == nil
	}
	switch {
	case has("dm"):
		return ClassDM
	case has("md"):
		return ClassMD
	case has("loop"):
		return ClassLoop
	case strings.Contains(resolved, "/nvme-subsystem/"):
		return ClassNVMe
	case has("disksize") && strings.HasPrefix(name, "zram"):
		return ClassZRAM
	}
	for _, c := range classByName {
		if c.re.MatchString(name) {
			return c.class
		}
	}
	return ClassUnknown
}

var scsiHostRe = regexp.MustCompile(`^host\d+$`)

// scsiTransport names the low-level driver of the SCSI host the disk hangs
// off: the host's scsi_host/hostN/proc_name ("virtio_scsi", "ahci",
// "storvsc", "mpt3sas"), else the driver of the nearest ancestor that has one.
func scsiTransport(s FS, resolved string) string {
	parts := strings.Split(resolved, string(filepath.Separator))
	for i := len(parts) - 1; i >= 0; i-- {
		if !scsiHostRe.MatchString(parts[i]) {
			continue
		}
		hostDir := string(filepath.Separator) + filepath.Join(parts[:i+1]...)
		if !filepath.IsAbs(resolved) {
			hostDir = filepath.Join(parts[:i+1]...)
		}
		if b, err := os.ReadFile(filepath.Join(hostDir, "scsi_host", parts[i], "proc_name")); err == nil {
			if name := strings.TrimSpace(string(b)); name != "" && name != "(null)" {
				return name
			}
		}
		for dir := filepath.Dir(hostDir); len(dir) > len(s.root); dir = filepath.Dir(dir) {
			if target, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
				return filepath.Base(target)
			}
		}
		return ""
	}
	return ""
}
