package policy

import (
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// matchKey is one key of [rule.match] and [rule.except]: how its value is
// read and tested, what a disk must be read for to test it, and how the
// manual describes it. Adding a key is adding an entry here (and a test):
// validation, matching, Policy.Needs, Policy.UsesNoWait and the manual's
// list of keys all come from this table.
type matchKey struct {
	name  string
	parse condParser
	// facts are what a disk must be read for to test the key, beyond what
	// every read has (name, class, driver, transport).
	facts sysfs.Facts
	// nodeTest: testing the key opens the disk's device node (the NOWAIT
	// test, package devnode), which costs more than the rest of a pass.
	nodeTest bool
	// syntax and doc are the manual's entry, in its markdown: the value's
	// form after "key =", and what the key tests.
	syntax, doc string
}

// matchKeys is the table of match keys, in the order they are tested,
// reported and documented. A function, not a variable: the parsers reach
// the table again (an unknown key's suggestions).
func matchKeys() []matchKey {
	return []matchKey{
		{
			name: "class", parse: parseClass,
			syntax: "*CLASS* | [*CLASS*, ...]",
			doc:    "The kind of disk, as **iosched list** shows it: " + classDoc() + ".",
		},
		{
			name: "name", parse: parseName,
			syntax: "*GLOB* | [*GLOB*, ...]",
			doc: "The kernel's name of the disk (**vda**, **nvme0n1**, **sdb**), matched " +
				"against shell patterns: **\\***, **?** and **[...]**, as in **\"nvme\\*\"**.",
		},
		{
			name:   "driver",
			parse:  stringsCond("driver", func(dev *sysfs.Device) string { return dev.Driver }, "no driver reported"),
			syntax: "*NAME* | [*NAME*, ...]",
			doc: "The driver bound to the disk, compared exactly, as **iosched list** " +
				"shows it (**virtio_blk**, **nvme**, **sd**, **loop**, **ublk_drv**, ...).",
		},
		{
			name:   "transport",
			parse:  stringsCond("transport", func(dev *sysfs.Device) string { return dev.Transport }, "not reported for this disk"),
			syntax: "*NAME* | [*NAME*, ...]",
			doc: "How a SCSI disk's host or an NVMe namespace's controller reaches the " +
				"storage, compared exactly (**virtio_scsi**, **storvsc**, **ahci**, " +
				"**tcp**, ...). Other classes have none, so the key never holds for them.",
		},
		{
			name:   "rotational",
			parse:  boolCond("rotational", func(dev *sysfs.Device) (*bool, string) { return dev.Rotational, "not reported by the kernel" }),
			facts:  sysfs.FactRotational,
			syntax: "*BOOL*",
			doc: "The kernel's *queue/rotational*. Virtual disks (virtio, virtual SCSI) " +
				"often claim to rotate whatever backs them; combine with **class** or an " +
				"**except** on **transport**, **vendor** or **model**.",
		},
		{
			name:   "removable",
			parse:  boolCond("removable", func(dev *sysfs.Device) (*bool, string) { return dev.Removable, "not reported by the kernel" }),
			facts:  sysfs.FactRemovable,
			syntax: "*BOOL*",
			doc:    "The kernel's *removable* attribute.",
		},
		{
			name: "nowait",
			parse: boolCond("nowait", func(dev *sysfs.Device) (*bool, string) {
				if dev.NoWaitReason != "" {
					return dev.NoWait, "not tested: " + dev.NoWaitReason
				}
				return dev.NoWait, "not tested"
			}),
			nodeTest: true,
			syntax:   "*BOOL*",
			doc: "Whether the driver accepts non-blocking (**RWF_NOWAIT**) I/O, as iosched " +
				"tested by opening the disk's node read-only.",
		},
		{
			name: "hw_queues", parse: parseHWQueues,
			facts:  sysfs.FactHWQueues,
			syntax: "*N* | { **min** = *N*, **max** = *N* }",
			doc: "The number of hardware queues (*mq/* directories): exactly *N*, or a range " +
				"with either end open. Bio-based disks (brd, zram, md, bio-based dm, pmem, " +
				"NVMe multipath heads) have 0.",
		},
		{
			name: "size", parse: parseSize,
			facts:  sysfs.FactSize,
			syntax: "{ **min** = *SIZE*, **max** = *SIZE* }",
			doc: "The disk's size, inclusive, either end optional. A *SIZE* is an integer " +
				"(bytes) or a string with a binary unit: **\"512M\"**, **\"1GiB\"**, " +
				"**\"4T\"**. **K** and **KiB** both mean 1024, likewise **M**, **G**, **T**, " +
				"**P**. Decimal units (**\"10GB\"**) are refused as ambiguous, fractions as " +
				"inexact.",
		},
		{
			name:   "model",
			parse:  regexpCond("model", func(dev *sysfs.Device) string { return dev.Model }),
			facts:  sysfs.FactIdentity,
			syntax: "*REGEXP* | [*REGEXP*, ...]",
			doc: "The disk's model as the kernel reports it, matched against regular " +
				"expressions (RE2 syntax, unanchored: write **^...$** to match the whole " +
				"value). Any one matching is enough. TOML literal strings " +
				"(**'^QEMU\\\\b'**) need no escaping of backslashes.",
		},
		{
			name:   "vendor",
			parse:  regexpCond("vendor", func(dev *sysfs.Device) string { return dev.Vendor }),
			facts:  sysfs.FactIdentity,
			syntax: "*REGEXP* | [*REGEXP*, ...]",
			doc:    "The disk's vendor as the kernel reports it, matched as **model** is.",
		},
		{
			name:   "serial",
			parse:  regexpCond("serial", func(dev *sysfs.Device) string { return dev.Serial }),
			facts:  sysfs.FactIdentity,
			syntax: "*REGEXP* | [*REGEXP*, ...]",
			doc:    "The disk's serial number as the kernel reports it, matched as **model** is.",
		},
		{
			name: "property", parse: parseProperty,
			syntax: "{ *NAME* = *GLOB* | [*GLOB*, ...], ... }",
			doc: "udev properties of the disk (**ID_BUS**, **ID_WWN**, ...), each matched " +
				"against shell patterns; every property named must match. Only the daemon " +
				"with **uevent_source = \"udev\"** knows them, from udevd's events: with " +
				"kernel uevents, and in **plan**, **apply** and **explain**, a rule with " +
				"**property** never matches, and an **except** with it never excludes.",
		},
	}
}

// lookupMatchKey is the entry of the key name, nil when there is none.
func lookupMatchKey(name string) *matchKey {
	keys := matchKeys()
	for i := range keys {
		if keys[i].name == name {
			return &keys[i]
		}
	}
	return nil
}

func matchKeyNames() []string {
	keys := matchKeys()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// KeyDoc is the manual's entry for one policy key.
type KeyDoc struct {
	Key string
	// Syntax is the value's form, after "key =", and Doc what the key
	// means, both in the manual's markdown.
	Syntax, Doc string
}

// MatchKeyDocs describes every key of [rule.match] and [rule.except], in
// order, for the manual.
func MatchKeyDocs() []KeyDoc {
	keys := matchKeys()
	out := make([]KeyDoc, len(keys))
	for i, k := range keys {
		out[i] = KeyDoc{Key: k.name, Syntax: k.syntax, Doc: k.doc}
	}
	return out
}

// classDoc lists the classes for the manual, from sysfs's table:
// "**virtio**, ..., **ram** (brd), ..., or **unknown**".
func classDoc() string {
	specs := sysfs.ClassSpecs()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = "**" + string(s.Class) + "**"
		if s.Doc != "" {
			names[i] += " (" + s.Doc + ")"
		}
	}
	return strings.Join(names[:len(names)-1], ", ") + ", or " + names[len(names)-1]
}
