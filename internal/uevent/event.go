package uevent

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
	"time"

	"github.com/pilebones/go-udev/netlink"

	"github.com/iosched/iosched/internal/sysfs"
)

// Event is a uevent about a whole disk, or the news that events were lost.
type Event struct {
	Action string     // add, change, remove
	Name   sysfs.Name // the kernel name, as in /sys/block, checked
	// Props are the udev properties, from udevd's events (Udev) only.
	Props map[string]string
	// Ident is the disk's MAJOR:MINOR and DISKSEQ (when the kernel sends
	// it); empty when the event lacks MAJOR or MINOR.
	Ident sysfs.Ident
	// DevPath is the disk's directory below /sys, as the event names it
	// ("/devices/virtual/block/loop7"): where its pass finds the disk
	// without looking up its link in /sys/block (sysfs.FS.Open).
	DevPath string
	// Lost: events may have been dropped, so every disk must be rescanned.
	Lost bool
	// UdevDone: udevd's event, once it ran its rules (UdevDone source).
	UdevDone bool
	// At is when the monitor received it, for the event-to-applied
	// latency.
	At time.Time
}

// Source says which events a Monitor hears, and how it reads them.
type Source int

const (
	// Kernel is the kernel's uevents: the kernel's format, no properties.
	Kernel Source = iota
	// Udev is udevd's processed events with every property, for
	// match.property: udev mode.
	Udev
	// UdevDone is udevd's processed add and change events of whole
	// disks, marked UdevDone, without properties: how the daemon learns,
	// in kernel mode, that udevd is done with a disk.
	UdevDone
)

func (s Source) String() string {
	switch s {
	case Kernel:
		return "kernel"
	case Udev:
		return "udev"
	case UdevDone:
		return "udevd done"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// udevGroup tells whether the source's messages come on udevd's netlink
// group rather than the kernel's.
func (s Source) udevGroup() bool { return s != Kernel }

// Parse decodes one raw message and keeps it (true) when it is an event the
// source passes on: an add, change or remove of a whole disk (add and
// change only for UdevDone); partitions and other subsystems are ignored.
// An error is a message it could not read.
func (s Source) Parse(raw []byte) (Event, bool, error) {
	if s == UdevDone {
		ev, ok := parseUdevd(raw)
		return ev, ok, nil
	}
	return parse(raw, s == Udev)
}

// parse decodes a kernel uevent, or udevd's message with every property
// (udev true).
func parse(raw []byte, udev bool) (Event, bool, error) {
	// Most uevents are not block disks' (a loop device brings a bdi one
	// too): skip them before reading their variables.
	if !bytes.Contains(raw, []byte("SUBSYSTEM=block\x00")) {
		return Event{}, false, nil
	}
	var v vars
	var env map[string]string
	if udev {
		// udevd's format, and every property kept for match.property.
		u, err := netlink.ParseUEvent(raw)
		if err != nil {
			return Event{}, false, err
		}
		env = u.Env
		v = vars{action: string(u.Action), kobj: u.KObj, subsystem: env["SUBSYSTEM"], devtype: env["DEVTYPE"],
			devpath: env["DEVPATH"], major: env["MAJOR"], minor: env["MINOR"], diskseq: env["DISKSEQ"]}
	} else {
		var err error
		if v, err = scanKernel(raw); err != nil {
			return Event{}, false, err
		}
	}
	switch netlink.KObjAction(v.action) {
	case netlink.ADD, netlink.CHANGE, netlink.REMOVE:
	default:
		return Event{}, false, nil
	}
	ev, ok, err := v.diskEvent()
	ev.Props = env
	return ev, ok, err
}

// diskEvent is the event of a whole disk these variables describe (false
// for anything else), named after its DEVPATH (the header's when there is
// none) and with its identity when MAJOR and MINOR are there.
func (v vars) diskEvent() (Event, bool, error) {
	if v.subsystem != "block" || v.devtype != "disk" {
		return Event{}, false, nil
	}
	devpath := v.devpath
	if devpath == "" {
		devpath = v.kobj
	}
	// DEVNAME is "/dev/x" in udev mode and may differ from the kernel name
	// (cciss!c0d0); the last DEVPATH element is the /sys/block name.
	name, err := sysfs.ParseName(path.Base(devpath))
	if err != nil || name.String() == "/" {
		return Event{}, false, fmt.Errorf("uevent with unusable DEVPATH %q", devpath)
	}
	ev := Event{Action: v.action, Name: name, DevPath: devpath}
	if v.major != "" && v.minor != "" {
		mm, err := sysfs.ParseMajorMinor(v.major + ":" + v.minor)
		if _, serr := strconv.ParseUint(v.diskseq, 10, 64); err == nil && (v.diskseq == "" || serr == nil) {
			ev.Ident = sysfs.Ident{MajorMinor: mm, DiskSeq: v.diskseq}
		}
	}
	return ev, true, nil
}

// vars are the variables of a uevent the daemon reads.
type vars struct {
	action, kobj                                       string
	subsystem, devtype, devpath, major, minor, diskseq string
}

// scanKernel reads a kernel uevent ("action@devpath\0KEY=value\0...") for
// the variables the daemon uses. go-udev's ParseUEvent builds a map of
// every variable, garbage that was a large share of what the daemon
// allocated in a burst of new disks (contrib/bench/README.md). The format
// checks are
// ParseUEvent's (one '@' in the header, '=' in every variable), and every
// variable must end with its NUL, as the kernel's all do.
func scanKernel(raw []byte) (vars, error) {
	var v vars
	header, rest, ok := bytes.Cut(raw, []byte{0})
	if !ok {
		return v, netlink.ErrWrongUEventFormat
	}
	action, kobj, ok := bytes.Cut(header, []byte("@"))
	if !ok || bytes.IndexByte(kobj, '@') >= 0 {
		return v, netlink.ErrWrongUEventFormat
	}
	v.action, v.kobj = string(action), string(kobj)
	err := v.scan(rest, false)
	return v, err
}

// scan reads the variables the daemon uses from NUL-terminated KEY=value
// strings, in place: only the values kept are copied. ACTION is read only
// when withAction (udevd's messages have no header that names it).
func (v *vars) scan(raw []byte, withAction bool) error {
	for len(raw) > 0 {
		field, rest, ok := bytes.Cut(raw, []byte{0})
		if !ok {
			return netlink.ErrWrongUEventFormat // no terminating NUL
		}
		raw = rest
		key, value, ok := bytes.Cut(field, []byte("="))
		if !ok {
			return netlink.ErrWrongUEventFormat
		}
		var dst *string
		switch string(key) { // no allocation: the compiler compares in place
		case "ACTION":
			if !withAction {
				continue
			}
			dst = &v.action
		case "SUBSYSTEM":
			dst = &v.subsystem
		case "DEVTYPE":
			dst = &v.devtype
		case "DEVPATH":
			dst = &v.devpath
		case "MAJOR":
			dst = &v.major
		case "MINOR":
			dst = &v.minor
		case "DISKSEQ":
			dst = &v.diskseq
		default:
			continue
		}
		*dst = string(value)
	}
	return nil
}
