package sysfs

import (
	"errors"
	"testing"
)

// ParseName refuses what ValidateName refuses; a Name's queue reads the
// disk of that name, and the zero Name's reads nothing.
func TestNameAndQueue(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b"} {
		if n, err := ParseName(bad); !errors.Is(err, ErrInvalidName) || !n.IsZero() {
			t.Errorf("ParseName(%q) = %q, %v; want the zero Name and ErrInvalidName", bad, n, err)
		}
	}
	fs, err := NewFS(cloudTree)
	if err != nil {
		t.Fatal(err)
	}
	vda, err := ParseName("vda")
	if err != nil || vda.String() != "vda" {
		t.Fatalf("ParseName(vda) = %q, %v", vda, err)
	}
	q := fs.Queue(vda)
	if got, err := q.ReadQueueAttr("scheduler"); err != nil || got != "mq-deadline" {
		t.Errorf("vda's scheduler through its queue = %q, %v; want mq-deadline", got, err)
	}
	if active, offered, err := q.ReadScheduler(); err != nil || active != "mq-deadline" || len(offered) < 2 {
		t.Errorf("vda's ReadScheduler = %q %v, %v", active, offered, err)
	}
	if !q.Exists() {
		t.Error("vda's queue: Exists false")
	}
	var zero Name
	if _, err := fs.Queue(zero).ReadQueueAttr("scheduler"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("the zero Name's queue read: %v, want ErrInvalidName", err)
	}
	if fs.Queue(zero).Exists() {
		t.Error("the zero Name's queue exists")
	}
	names, err := fs.Names()
	if err != nil || len(names) == 0 || names[0].IsZero() {
		t.Fatalf("Names: %v, %v", names, err)
	}
}
