package sysfs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// classify fills Class, Driver, Transport and the dm fields of d, whose
// directory (symlinks resolved) is resolved, inside the tree at root. The
// signals, most trusted first: the driver bound to the disk's device, the
// layout (driver-specific directories, the parent an NVMe namespace hangs
// off), and the name only when nothing else says.
func classify(d *Device, resolved, root string, r *reader) {
	d.Driver = boundDriver(r)
	c, ok := classByDriver(d.Driver)
	if !ok {
		c = classByLayout(d.Name, resolved, r)
	}
	d.Class = c
	if d.Driver == "" {
		d.Driver = c.Spec().Module
	}
	switch c {
	case ClassSCSI:
		d.Transport = scsiTransport(resolved, root)
	case ClassNVMe:
		// The controller's transport: "pcie", "tcp", "rdma", "fc" or
		// "loop". A multipath head hangs off the subsystem, which has
		// none: its paths (the hidden nvmeXcYnZ disks) do.
		d.Transport = r.text("device/transport")
	case ClassDM:
		d.DMName = r.text("dm/name")
		d.DMUUID = r.text("dm/uuid")
		// multipath-tools names its maps' uuids "mpath-<wwid>".
		d.Multipath = strings.HasPrefix(d.DMUUID, "mpath-")
	}
}

// boundDriver is the name of the driver bound to the disk's device: the
// device itself (virtio, SCSI, mmc, xen, pmem) or, for an NVMe namespace,
// the parent of its controller (the controller is a class device with no
// driver; the PCI function it sits on is bound to "nvme").
func boundDriver(r *reader) string {
	if target := r.readlink("device/driver"); target != "" {
		return filepath.Base(target)
	}
	if subsystem(r, "device") == "nvme" {
		if target := r.readlink("device/device/driver"); target != "" {
			return filepath.Base(target)
		}
	}
	return ""
}

// subsystem is the class or bus the device directory rel belongs to (the
// base of its "subsystem" link), or "".
func subsystem(r *reader, rel string) string {
	if target := r.readlink(rel + "/subsystem"); target != "" {
		return filepath.Base(target)
	}
	return ""
}

// classByLayout classifies a disk no class's driver is bound to: by a
// class's Marker in its directory, by the NVMe subsystem it hangs off, or
// by a class's Names.
func classByLayout(name, resolved string, r *reader) Class {
	for _, s := range classSpecs {
		if s.Marker != "" && r.exists(s.Marker) {
			return s.Class
		}
	}
	switch subsystem(r, "device") {
	case "nvme", "nvme-subsystem":
		// A namespace of a fabrics controller (no PCI driver to find) or
		// a multipath head, which hangs off its subsystem.
		return ClassNVMe
	}
	for _, elem := range strings.Split(filepath.ToSlash(filepath.Dir(resolved)), "/") {
		if elem == "nvme-subsystem" || elem == "nvme-fabrics" {
			return ClassNVMe
		}
	}
	return classByName(name)
}

// classByName is the class whose naming convention name follows,
// ClassUnknown when none does.
func classByName(name string) Class {
	for _, s := range classSpecs {
		if s.Names != nil && s.Names.MatchString(name) {
			return s.Class
		}
	}
	return ClassUnknown
}

var scsiHostRe = regexp.MustCompile(`^host\d+$`)

// transportAlias maps a SCSI host's proc_name to the name policies use where
// the two differ: storvsc registers its host template as "storvsc_host"
// (drivers/scsi/storvsc_drv.c).
var transportAlias = map[string]string{
	"storvsc_host": "storvsc",
}

// scsiTransport names the low-level driver of the SCSI host the disk hangs
// off: the host's scsi_host/hostN/proc_name ("virtio_scsi", "ahci",
// "storvsc", "mpt3sas", "iscsi_tcp"), else the driver of the controller the
// host was registered on (hostController). It never looks above root.
func scsiTransport(resolved, root string) string {
	root = filepath.Clean(root)
	for dir := filepath.Dir(resolved); isBelow(dir, root); dir = filepath.Dir(dir) {
		base := filepath.Base(dir)
		if !scsiHostRe.MatchString(base) {
			continue
		}
		if b, err := readFile(filepath.Join(dir, "scsi_host", base, "proc_name")); err == nil {
			if name := strings.TrimSpace(string(b)); name != "" && name != "(null)" {
				if alias, ok := transportAlias[name]; ok {
					return alias
				}
				return name
			}
		}
		return hostController(filepath.Dir(dir), root)
	}
	return ""
}

var (
	virtioDevRe = regexp.MustCompile(`^virtio\d+$`)
	pciFuncRe   = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
)

// virtioSCSIID is the virtio device ID of a SCSI host
// (include/uapi/linux/virtio_ids.h VIRTIO_ID_SCSI), as a virtioN device's
// "device" file shows it.
const virtioSCSIID = "0x0008"

// hostController is the driver of the device a SCSI host was registered on,
// found from the host's parent directory dir upwards: the first driver
// link, but
//   - a virtioN device is the controller itself: its driver (virtio_scsi)
//     is the transport, or its device ID says it when the link is missing.
//     The PCI function above it is bound to virtio-pci, which carries any
//     virtio device and says nothing about this one;
//   - the search ends at the first PCI function (an AHCI or SAS controller,
//     or the function of a virtio device): above it are bridges and PCIe
//     ports (pcieport), which carry every device behind them.
//
// "" when the tree does not say.
func hostController(dir, root string) string {
	for ; isBelow(dir, root); dir = filepath.Dir(dir) {
		base := filepath.Base(dir)
		driver := ""
		if target, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
			driver = filepath.Base(target)
		}
		switch {
		case virtioDevRe.MatchString(base):
			if driver == "" {
				if b, err := readFile(filepath.Join(dir, "device")); err == nil && strings.TrimSpace(string(b)) == virtioSCSIID {
					driver = "virtio_scsi"
				}
			}
			return driver
		case driver == "pcieport":
			return ""
		case driver != "":
			return driver
		case pciFuncRe.MatchString(base):
			return ""
		}
	}
	return ""
}

// isBelow reports whether dir is strictly inside root (both clean).
func isBelow(dir, root string) bool {
	rel, err := filepath.Rel(root, dir)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}
