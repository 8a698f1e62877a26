package sysfs

import (
	"encoding/binary"
	"testing"
)

// dirent is one linux_dirent64 record, as getdents64 returns it.
func dirent(name string) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint16(b[16:], uint16(reclen))
	copy(b[19:], name)
	return b
}

// The names a listing finds answer absent: a name is present only whole
// (device is not dev, md is not mq), "." always, "." and ".." records are
// not names.
func TestListedNamesAbsent(t *testing.T) {
	t.Parallel()
	var buf []byte
	for _, n := range []string{".", "..", "device", "queue", "md_x", "size"} {
		buf = append(buf, dirent(n)...)
	}
	r := reader{top: string(appendDirents([]byte{0, '.', 0}, buf))}
	if r.top != "\x00.\x00device\x00queue\x00md_x\x00size\x00" {
		t.Fatalf("listing %q", r.top)
	}
	for rel, want := range map[string]bool{
		"device/driver": false, "queue/scheduler": false, "size": false, ".": false,
		"dev": true, "vice": true, "md": true, "x": true, "queu": true, "sizes": true, "mq": true, "..": true,
	} {
		if got := r.absent(rel); got != want {
			t.Errorf("absent(%q) = %v, want %v", rel, got, want)
		}
	}
	// A record cut short (a truncated buffer) ends the names there.
	cut := append(dirent("dm"), dirent("loop")[:10]...)
	if got := string(appendDirents(nil, cut)); got != "dm\x00" {
		t.Errorf("names of a cut buffer %q", got)
	}
}
