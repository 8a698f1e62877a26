package daemon

import (
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/uevent"
)

// A removal forgets; an event after it (the disk is back, or another one
// under its name) wins over it; a rescan's settingsOnly does not. The work
// queued for a disk starts as the zero job, as the queue gives it.
func TestQueuedWorkMergesRemoval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kicks []passKind
		want  passKind
	}{
		{[]passKind{full, removal}, removal},
		{[]passKind{removal, full}, full},
		{[]passKind{removal, full, settingsOnly}, full},
		{[]passKind{removal, settingsOnly}, removal},
		{[]passKind{settingsOnly, full, settingsOnly}, full},
		{[]passKind{settingsOnly}, settingsOnly},
		{[]passKind{removal}, removal},
	}
	for _, tt := range tests {
		var j job
		for _, k := range tt.kicks {
			j.merge(k, nil)
		}
		if j.kind != tt.want {
			t.Errorf("kicks %v: a pass of kind %v, want %v", tt.kicks, j.kind, tt.want)
		}
	}
}

// Kicks for a disk that is queued but not started merge into one pass,
// the strongest kind asked, with the newest properties.
func TestQueuedWorkMergesProps(t *testing.T) {
	t.Parallel()
	var j job
	j.merge(settingsOnly, nil)
	j.merge(full, &uevent.Event{Props: map[string]string{"ID_BUS": "ata"}})
	j.merge(settingsOnly, nil)
	if j.kind != full || j.props["ID_BUS"] != "ata" {
		t.Errorf("merged pass = %+v, want a full one with the newest properties", j)
	}
}

// A merged pass takes the identity of the newest uevent, and none when a
// scan asked for it too: the scan after lost events reads it afresh.
func TestQueuedWorkMergesIdent(t *testing.T) {
	t.Parallel()
	a := &uevent.Event{Ident: sysfs.Ident{MajorMinor: "7:1", DiskSeq: "1"}}
	b := &uevent.Event{Ident: sysfs.Ident{MajorMinor: "7:1", DiskSeq: "2"}}
	var j job
	j.merge(full, a)
	j.merge(removal, &uevent.Event{})
	j.merge(full, b)
	if j.ident != b.Ident || j.kind != full {
		t.Errorf("after add, remove, add: %+v, want the second disk's identity, a full pass", j)
	}
	j.merge(full, nil)
	if j.ident != (sysfs.Ident{}) {
		t.Errorf("after a scan: identity %+v, want none", j.ident)
	}
}
