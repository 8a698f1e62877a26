package uevent

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/pilebones/go-udev/netlink"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

func TestParseEvent(t *testing.T) {
	t.Parallel()
	udevMsg := func(props string) []byte {
		// libudev's header: "libudev\0", magic (big endian), header size,
		// properties offset and length (native endian), filter fields.
		h := make([]byte, 40)
		copy(h, "libudev\x00")
		h[8], h[9], h[10], h[11] = 0xfe, 0xed, 0xca, 0xfe
		h[12] = 40
		h[16] = 40
		h[20] = byte(len(props))
		return append(h, props...)
	}
	tests := []struct {
		name   string
		raw    []byte
		udev   bool
		ok     bool
		want   Event
		hasErr bool
	}{
		{"add of a disk", ueventtest.KernelMsg("add", "loop7", "disk"), false, true, Event{Action: "add", Name: name("loop7")}, false},
		{"change of a disk", ueventtest.KernelMsg("change", "vda", "disk"), false, true, Event{Action: "change", Name: name("vda")}, false},
		{"remove of a disk", ueventtest.KernelMsg("remove", "loop7", "disk"), false, true, Event{Action: "remove", Name: name("loop7")}, false},
		{"a partition", ueventtest.KernelMsg("add", "vda1", "partition"), false, false, Event{}, false},
		{"bind is not for us", ueventtest.KernelMsg("bind", "vda", "disk"), false, false, Event{}, false},
		{"another subsystem", []byte("add@/devices/virtual/bdi/7:7\x00ACTION=add\x00DEVPATH=/devices/virtual/bdi/7:7\x00SUBSYSTEM=bdi\x00"), false, false, Event{}, false},
		{"the kernel name, not DEVNAME", []byte("add@/devices/pci0000:00/cciss!c0d0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/cciss!c0d0\x00SUBSYSTEM=block\x00DEVNAME=cciss/c0d0\x00DEVTYPE=disk\x00"), false, true, Event{Action: "add", Name: name("cciss!c0d0"), DevPath: "/devices/pci0000:00/cciss!c0d0"}, false},
		{"garbage", []byte("hello"), false, false, Event{}, false},
		{"garbage that says block", []byte("hello\x00SUBSYSTEM=block\x00"), false, false, Event{}, true},
		{"the identity from MAJOR, MINOR and DISKSEQ",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVNAME=loop7\x00DEVTYPE=disk\x00DISKSEQ=42\x00"),
			false, true, Event{Action: "add", Name: name("loop7"), Ident: sysfs.Ident{MajorMinor: "7:7", DiskSeq: "42"}, DevPath: "/devices/virtual/block/loop7"}, false},
		{"no DISKSEQ (before 5.15)",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00"),
			false, true, Event{Action: "add", Name: name("loop7"), Ident: sysfs.Ident{MajorMinor: "7:7"}}, false},
		{"an unusable identity is left to be read",
			[]byte("add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=x\x00DEVTYPE=disk\x00DISKSEQ=1\x00"),
			false, true, Event{Action: "add", Name: name("loop7")}, false},
		{"a header without '@'", []byte("add /devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00"), false, false, Event{}, true},
		{"a variable without '='", []byte("add@/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE\x00"), false, false, Event{}, true},
		{"an unterminated variable", []byte("add@/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk"), false, false, Event{}, true},
		{"an action not acted on", []byte("online@/devices/virtual/block/loop7\x00ACTION=online\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00"), false, false, Event{}, false},
		{"udev mode keeps the properties",
			udevMsg("ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00DEVTYPE=disk\x00DEVNAME=/dev/loop7\x00ID_BUS=ata\x00"),
			true, true, Event{Action: "add", Name: name("loop7"), Props: map[string]string{"ID_BUS": "ata"}, DevPath: "/devices/virtual/block/loop7"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := parse(tt.raw, tt.udev)
			if (err != nil) != tt.hasErr {
				t.Fatalf("error = %v, want error: %v", err, tt.hasErr)
			}
			if ok != tt.ok {
				t.Fatalf("kept = %v, want %v", ok, tt.ok)
			}
			if got.Action != tt.want.Action || got.Name != tt.want.Name || got.Ident != tt.want.Ident {
				t.Errorf("got %s %s %+v, want %s %s %+v", got.Action, got.Name, got.Ident, tt.want.Action, tt.want.Name, tt.want.Ident)
			}
			if tt.want.DevPath != "" && got.DevPath != tt.want.DevPath {
				t.Errorf("DevPath %q, want %q", got.DevPath, tt.want.DevPath)
			}
			for k, v := range tt.want.Props {
				if got.Props[k] != v {
					t.Errorf("property %s = %q, want %q", k, got.Props[k], v)
				}
			}
			if !tt.udev && got.Props != nil {
				t.Errorf("kernel-mode event carries properties %v", got.Props)
			}
		})
	}
}

func TestParseUdevd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		raw  []byte
		want string // the disk, "" when dropped
	}{
		{"change of a disk", ueventtest.UdevdMsg("change", "loop20000", "disk"), "loop20000"},
		{"add of a disk", ueventtest.UdevdMsg("add", "loop20000", "disk"), "loop20000"},
		{"remove", ueventtest.UdevdMsg("remove", "loop20000", "disk"), ""},
		{"partition", ueventtest.UdevdMsg("add", "loop20000p1", "partition"), ""},
		{"kernel format", ueventtest.KernelMsg("add", "loop20000", "disk"), ""},
		{"bad magic", func() []byte { b := ueventtest.UdevdMsg("add", "loop20000", "disk"); b[8] = 0; return b }(), ""},
		{"offset past the end", func() []byte {
			b := ueventtest.UdevdMsg("add", "loop20000", "disk")
			binary.NativeEndian.PutUint32(b[16:], uint32(len(b)+1))
			return b
		}(), ""},
		{"unterminated property", ueventtest.UdevdMsg("add", "loop20000", "disk")[:len(ueventtest.UdevdMsg("add", "loop20000", "disk"))-1], ""},
	} {
		ev, ok := parseUdevd(tc.raw)
		if got := map[bool]string{true: ev.Name.String()}[ok]; got != tc.want {
			t.Errorf("%s: kept %q, want %q", tc.name, got, tc.want)
		}
		if ok && (!ev.UdevDone || ev.Props != nil || ev.Ident.MajorMinor != "7:0") {
			t.Errorf("%s: event %+v", tc.name, ev)
		}
	}
}

// scanKernel reads what go-udev's ParseUEvent reads from every kernel
// message both accept (go test -fuzz FuzzScanKernel ./uevent).
func FuzzScanKernel(f *testing.F) {
	f.Add(ueventtest.KernelMsg("add", "loop7", "disk"))
	f.Add([]byte("change@/devices/virtual/block/loop7\x00ACTION=change\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00DISKSEQ=42\x00"))
	f.Add([]byte("add@/devices/virtual/bdi/7:7\x00ACTION=add\x00SUBSYSTEM=bdi\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := scanKernel(raw)
		if bytes.HasPrefix(raw, []byte("libudev\x00")) {
			return // not the kernel's format
		}
		u, uerr := netlink.ParseUEvent(raw)
		if uerr != nil {
			return // ParseUEvent also refuses actions it does not know
		}
		if err != nil {
			if bytes.HasSuffix(raw, []byte{0}) {
				t.Fatalf("refused %q, which ParseUEvent reads: %v", raw, err)
			}
			return // an unterminated last variable, which ParseUEvent drops
		}
		want := vars{action: string(u.Action), kobj: u.KObj, subsystem: u.Env["SUBSYSTEM"], devtype: u.Env["DEVTYPE"],
			devpath: u.Env["DEVPATH"], major: u.Env["MAJOR"], minor: u.Env["MINOR"], diskseq: u.Env["DISKSEQ"]}
		if v != want {
			t.Fatalf("%q: scanned %+v, ParseUEvent %+v", raw, v, want)
		}
	})
}

// Both parsers copy only the values they keep: a burst of 1000 new disks
// brings 2000 events, and a map of every variable (go-udev's ParseUEvent)
// would be kilobytes each. The bounds are what the shared scanner
// allocates (go test -run TestParseAllocs ./uevent; 7 and 6 when it was
// introduced).
func TestParseAllocs(t *testing.T) {
	k := []byte("change@/devices/virtual/block/loop7\x00ACTION=change\x00DEVPATH=/devices/virtual/block/loop7\x00SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVTYPE=disk\x00DISKSEQ=42\x00")
	u := ueventtest.UdevdMsg("change", "loop20000", "disk")
	if n := testing.AllocsPerRun(100, func() { _, _, _ = parse(k, false) }); n > 7 {
		t.Errorf("kernel uevent: %v allocations, want at most 7", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = parseUdevd(u) }); n > 6 {
		t.Errorf("udevd event: %v allocations, want at most 6", n)
	}
}

// name is a disk name a test spells out, checked as the parser checks it.
func name(s string) sysfs.Name {
	n, err := sysfs.ParseName(s)
	if err != nil {
		panic(err)
	}
	return n
}
