package main

import (
	"strings"
	"testing"
)

func uevent(header string, kv ...string) []byte {
	return []byte(header + "\x00" + strings.Join(kv, "\x00") + "\x00")
}

func TestWanted(t *testing.T) {
	t.Parallel()
	add := func(name string, extra ...string) []byte {
		kv := append([]string{"ACTION=add", "DEVPATH=/devices/virtual/block/" + name, "SUBSYSTEM=block", "DEVNAME=" + name}, extra...)
		return uevent("add@/devices/virtual/block/"+name, kv...)
	}
	tests := []struct {
		what string
		msg  []byte
		want string
	}{
		{"first of the range", add("loop40000", "DEVTYPE=disk"), "loop40000"},
		{"last of the range", add("loop40009", "DEVTYPE=disk"), "loop40009"},
		{"one past the range", add("loop40010", "DEVTYPE=disk"), ""},
		{"one before the range", add("loop39999", "DEVTYPE=disk"), ""},
		{"partition", add("loop40001p1", "DEVTYPE=partition"), ""},
		{"not a loop", add("sda", "DEVTYPE=disk"), ""},
		{"loop-control", add("loop-control", "DEVTYPE=disk"), ""},
		{"signed number", add("loop+40001", "DEVTYPE=disk"), ""},
		{"no DEVTYPE", add("loop40001"), ""},
		{"change", uevent("change@/devices/virtual/block/loop40001", "ACTION=change", "SUBSYSTEM=block", "DEVTYPE=disk", "DEVNAME=loop40001"), ""},
		{"remove", uevent("remove@/devices/virtual/block/loop40001", "ACTION=remove", "SUBSYSTEM=block", "DEVTYPE=disk", "DEVNAME=loop40001"), ""},
		{"bdi of a loop", uevent("add@/devices/virtual/bdi/7:1", "ACTION=add", "SUBSYSTEM=bdi"), ""},
		{"udevd's copy", uevent("libudev", "ACTION=add", "SUBSYSTEM=block", "DEVTYPE=disk", "DEVNAME=loop40001"), ""},
		{"empty", nil, ""},
	}
	for _, tc := range tests {
		got, ok := wanted(tc.msg, 40000, 10)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: wanted() = %q, %v; want %q", tc.what, got, ok, tc.want)
		}
	}
}
