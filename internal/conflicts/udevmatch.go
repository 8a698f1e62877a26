package conflicts

import (
	"slices"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// verdict is what iosched can tell of a condition on a disk.
type verdict int8

const (
	fails verdict = iota
	unknown
	holds
)

// udevEvent is a block uevent for a whole disk as udevd would process it.
type udevEvent struct {
	action string
	dev    *sysfs.Device
	known  Known
}

// eval tells whether every condition of r holds for ev, and which could not
// be decided.
func (r *udevRule) eval(ev udevEvent) (verdict, []string) {
	v := holds
	var open []string
	for _, m := range r.matches {
		switch m.eval(ev) {
		case fails:
			return fails, nil
		case unknown:
			v = unknown
			open = append(open, m.text)
		}
	}
	return v, open
}

// eval decides one condition. Keys naming the event or the disk itself are
// decided from the snapshot; those needing what other rules set, programs,
// files or parents iosched does not read are unknown.
func (m udevMatch) eval(ev udevEvent) verdict {
	d := ev.dev
	value, known := "", true
	switch m.key {
	case "ACTION":
		value = ev.action
	case "KERNEL", "NAME":
		value = d.Name
	case "SUBSYSTEM":
		value = "block"
	case "DRIVER":
		value = "" // a block device has no driver; its parent has
	case "DEVPATH":
		value, known = "/"+d.Path, d.Path != ""
	case "ENV":
		value, known = envValue(d, m.attr)
	case "ATTR":
		var present bool
		value, present, known = ev.known.attrValue(d, m.attr)
		if known && !present {
			// udevd: a missing attribute matches neither == nor !=
			// (token_match_attr returns false).
			return fails
		}
	case "KERNELS", "SUBSYSTEMS", "DRIVERS", "ATTRS":
		return m.evalParents(ev)
	default:
		known = false // PROGRAM, RESULT, TEST, IMPORT, TAG, SYMLINK, CONST, SYSCTL, ...
	}
	if !known {
		return unknown
	}
	if m.matches(value) != m.negate {
		return holds
	}
	return fails
}

// evalParents decides KERNELS, SUBSYSTEMS, DRIVERS and ATTRS, which hold
// when the device or any of its parents matches. The device itself is
// known; parents are known to be none only for a disk directly under
// devices/virtual/block; otherwise only a match on the device itself is
// decided, and ATTRS{model} and ATTRS{vendor}, from the disk's model and
// vendor when known: they are read from the one parent that has such files
// (the SCSI device, the NVMe controller); the host, target and PCI
// devices above have none.
func (m udevMatch) evalParents(ev udevEvent) verdict {
	d := ev.dev
	virtual := noParent(d)
	var self string
	selfKnown, selfPresent := true, true
	switch m.key {
	case "KERNELS":
		self = d.Name
	case "SUBSYSTEMS":
		self = "block"
	case "DRIVERS":
		selfPresent = false
	case "ATTRS":
		self, selfPresent, selfKnown = ev.known.attrValue(d, m.attr)
		if !virtual && (m.attr == "model" || m.attr == "vendor") {
			v := d.Model
			if m.attr == "vendor" {
				v = d.Vendor
			}
			if v == "" {
				return unknown
			}
			if m.matches(v) != m.negate {
				return holds
			}
			return fails
		}
	}
	switch {
	case !selfKnown:
		return unknown
	case selfPresent && m.matches(self) != m.negate:
		return holds
	case virtual:
		return fails // no parent could match instead
	}
	return unknown
}

// matches applies m's pattern as udevd does (token_match_string): '|'
// separates alternatives, an empty alternative matches an empty value,
// each is a glob, and i"..." ignores case.
func (m udevMatch) matches(s string) bool {
	pattern := m.value
	if m.nocase {
		pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	}
	if pattern == "" {
		return s == ""
	}
	for _, alt := range strings.Split(pattern, "|") {
		switch {
		case alt == "":
			if s == "" {
				return true
			}
		case hasGlob(alt):
			if fnmatch(alt, s) {
				return true
			}
		case alt == s:
			return true
		}
	}
	return false
}

// envValue is the udev property key of a disk's event, when the kernel
// sets it; properties other rules or programs add are not known here.
func envValue(d *sysfs.Device, key string) (string, bool) {
	switch key {
	case "DEVTYPE":
		return "disk", true
	case "SUBSYSTEM":
		return "block", true
	case "DEVPATH":
		return "/" + d.Path, d.Path != ""
	case "MAJOR", "MINOR":
		maj, min, ok := strings.Cut(d.MajorMinor, ":")
		if !ok {
			return "", false
		}
		if key == "MAJOR" {
			return maj, true
		}
		return min, true
	case "DEVNAME":
		if d.DevName != "" {
			return "/dev/" + d.DevName, true
		}
		if strings.Contains(d.Name, "!") {
			return "", false // the node is in a subdirectory uevent names
		}
		return "/dev/" + d.Name, true
	}
	if v, ok := d.Properties[key]; ok {
		return v, true
	}
	return "", false
}

// attrValue is a sysfs attribute of the disk as udevd would read it for
// ATTR{}: its value, whether the file exists, and whether that can be told
// here: from the snapshot, else from k.Attr. An attribute the policy
// writes is not known (iosched and udevd race to it). Trailing blanks are
// trimmed, as udevd trims them.
func (k Known) attrValue(d *sysfs.Device, attr string) (value string, present, known bool) {
	attr = strings.Trim(attr, "/")
	if name, ok := queueAttr(attr); ok && slices.Contains(k.Written, name) {
		return "", false, false
	}
	if value, present, known = snapshotAttr(d, attr); known {
		return value, present, known
	}
	if k.Attr == nil {
		return "", false, false
	}
	v, present, err := k.Attr(attr)
	if err != nil {
		return "", false, false
	}
	return strings.TrimRight(v, " \t\n\r"), present, true
}

// snapshotAttr is attrValue from the snapshot alone.
func snapshotAttr(d *sysfs.Device, attr string) (value string, present, known bool) {
	optBool := func(b *bool) (string, bool, bool) {
		if b == nil {
			return "", false, false
		}
		if *b {
			return "1", true, true
		}
		return "0", true, true
	}
	switch attr {
	case "queue/rotational":
		return optBool(d.Rotational)
	case "removable":
		return optBool(d.Removable)
	case "queue/zoned":
		return d.Zoned, d.Zoned != "", d.Zoned != ""
	case "size":
		if d.SizeBytes == nil {
			return "", false, false
		}
		return strconv.FormatUint(*d.SizeBytes/512, 10), true, true
	case "queue/scheduler":
		switch {
		case d.Scheduler != nil:
			return schedulerFile(*d.Scheduler, d.Schedulers), true, true
		case d.BioBased():
			return "", false, true
		}
		return "", false, false
	case "dev":
		return d.MajorMinor, d.MajorMinor != "", d.MajorMinor != ""
	}
	if name, ok := strings.CutPrefix(attr, "queue/"); ok {
		if v, ok := d.Tunables[name]; ok {
			return v, true, true
		}
	}
	return "", false, false
}

// schedulerFile is queue/scheduler's text: every scheduler offered, the
// active one in brackets (block/elevator.c elv_iosched_show).
func schedulerFile(active string, offered []string) string {
	parts := make([]string, len(offered))
	for i, s := range offered {
		if s == active {
			s = "[" + s + "]"
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}

// noParent reports whether the disk has no parent device: it sits in
// devices/virtual/block, whose directories above are not devices (loop,
// dm, md, zram, brd, ...). An NVMe multipath head, under
// devices/virtual/nvme-subsystem/nvme-subsysN, has one.
func noParent(d *sysfs.Device) bool {
	return d.Path == "devices/virtual/block/"+d.Name
}
