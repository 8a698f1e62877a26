package originals

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/treetest"
	"golang.org/x/sys/unix"
)

// TestResettableWalksTheTable: every attribute the table says a scheduler
// switch resets is recorded before a switch (a tunable added to the table
// with the scheduler resetting it is then restored after a probe without
// another change), and nothing else is.
func TestResettableWalksTheTable(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, "../../testdata/sysfs/cloud")
	var want []sysfs.Attr
	for _, spec := range sysfs.Attributes() {
		if !sysfs.Attr("scheduler").Resets(spec.Attr) {
			continue
		}
		want = append(want, spec.Attr)
		if spec.Kind == sysfs.KindTunable {
			// The disk has it, with a value of its own.
			if err := os.WriteFile(filepath.Join(tree, "block", "vda", "queue", string(spec.Attr)), []byte("4242\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs, err := sysfs.NewFS(tree)
	if err != nil {
		t.Fatal(err)
	}
	values, err := Capture(fs, "vda")
	if err != nil {
		t.Fatal(err)
	}
	if values["scheduler"] != "mq-deadline" {
		t.Errorf("scheduler %q, want mq-deadline", values["scheduler"])
	}
	for _, a := range want {
		if a.Kind() == sysfs.KindTunable && values[string(a)] != "4242" {
			t.Errorf("%s, which a switch resets, recorded as %q, want 4242", a, values[string(a)])
		}
	}
	for a := range values {
		if a != "scheduler" && !sysfs.Attr("scheduler").Resets(sysfs.Attr(a)) {
			t.Errorf("%s recorded, but the table says a switch leaves it", a)
		}
	}
}

// TestCheck: a record is true while the disk shows a state its writer
// left, a value of it or the original; a parameter counts only while its
// state's scheduler runs; anything else is stale, naming what differs. A
// record that keeps no state cannot be checked.
func TestCheck(t *testing.T) {
	t.Parallel()
	r := &Record{Values: map[string]string{"scheduler": "kyber", "nr_requests": "64", "iosched/read_lat_nsec": "2000000"}}
	disk := map[string]string{}
	read := func(a string) (string, error) {
		v, ok := disk[a]
		if !ok {
			return "", os.ErrNotExist
		}
		return v, nil
	}
	set := func(kv ...string) {
		clear(disk)
		for i := 0; i < len(kv); i += 2 {
			disk[kv[i]] = kv[i+1]
		}
	}
	set("scheduler", "bfq", "nr_requests", "77")
	if err := r.Check(read); err != nil {
		t.Errorf("no state kept: Check = %v, want nil (unchecked)", err)
	}
	r.Pending(map[string]string{"scheduler": "none"})
	set("scheduler", "none", "nr_requests", "77")
	if err := r.Check(read); err != nil {
		t.Errorf("a pending switch landed: %v", err)
	}
	r.Landed(map[string]string{"scheduler": "mq-deadline", "nr_requests": "256", "iosched/fifo_batch": "16"})
	for _, tc := range []struct {
		disk  []string
		stale string
	}{
		{[]string{"scheduler", "mq-deadline", "nr_requests", "256", "iosched/fifo_batch", "16"}, ""},
		{[]string{"scheduler", "mq-deadline", "nr_requests", "64", "iosched/fifo_batch", "16"}, ""},   // a value back
		{[]string{"scheduler", "kyber", "nr_requests", "64", "iosched/read_lat_nsec", "2000000"}, ""}, // all back
		{[]string{"scheduler", "mq-deadline", "nr_requests", "77", "iosched/fifo_batch", "16"}, "nr_requests is \"77\""},
		{[]string{"scheduler", "bfq", "nr_requests", "256"}, "scheduler is \"bfq\""},
		{[]string{"scheduler", "mq-deadline", "nr_requests", "256", "iosched/fifo_batch", "8"}, "iosched/fifo_batch"},
		{[]string{"scheduler", "mq-deadline"}, "nr_requests cannot be read"},
	} {
		set(tc.disk...)
		err := r.Check(read)
		switch {
		case tc.stale == "" && err != nil:
			t.Errorf("disk %v: Check = %v, want true", tc.disk, err)
		case tc.stale != "" && (!errors.Is(err, ErrStale) || !strings.Contains(err.Error(), tc.stale)):
			t.Errorf("disk %v: Check = %v, want stale naming %s", tc.disk, err, tc.stale)
		}
	}
}

// TestReadFormats: File's format round-trips; entries with nothing to
// put back are dropped; an unreadable file is an error, moved aside whole.
func TestReadFormats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "originals.json")
	f := &File{BootID: "b", PID: 7, Disks: map[string]*Record{"vda": {DiskSeq: "3", Values: map[string]string{"scheduler": "none"},
		Left: []map[string]string{{"scheduler": "bfq"}}}}}
	if err := f.Write(p, true); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p)
	if err != nil || got.BootID != "b" || got.PID != 7 || got.Disks["vda"] == nil || got.Disks["vda"].Left[0]["scheduler"] != "bfq" {
		t.Fatalf("Read = %+v, %v", got, err)
	}

	writeFile(t, p, `{"boot_id": "b", "disks": {"vda": {"values": {"nr_requests": "4"}}, "vdb": null, "../x": {"values": {}}}}`)
	got, err = Read(p)
	if err != nil || len(got.Disks) != 1 || got.Disks["vda"] == nil {
		t.Fatalf("Read = %+v, %v; want vda only", got, err)
	}

	writeFile(t, p, `{"boot_id": `)
	if _, err := Read(p); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("truncated file: Read = %v, want an error", err)
	}
	aside, err := MoveAside(p)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := Aside(dir); err != nil || len(list) != 1 || list[0] != aside {
		t.Errorf("Aside = %v, %v; want [%s]", list, err, aside)
	}
	if _, err := Read(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after MoveAside: Read = %v, want not exist", err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadRefusesWhatIsNotARecord: a FIFO where a record should be (whose
// open would wait for a writer for ever, stopping the daemon's start), or a
// link to /dev/zero (read until memory runs out), is an error at once that
// names the file.
func TestReadRefusesWhatIsNotARecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "probe-loop0.originals.json")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "originals.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, zero} {
		done := make(chan error, 1)
		go func() { _, err := Read(p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("Read(%s) = %v, want an error naming the file", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) still blocked after 5 s", p)
		}
	}
}
