package observe

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
)

// Loop numbers 7400-7449 (see internal/looptest).

// TestIntegrationDiskGone: a Disk reads a real disk's stat file again at
// each Read, and once the disk is removed, Read fails with ENODEV naming
// the file, never with stale counters.
func TestIntegrationDiskGone(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7400)
	l.Bind(t, 1<<20)
	path := StatPath("/sys", l.Name)
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.Read()
	if err != nil || a.Fields < 11 {
		t.Fatalf("%+v, %v", a, err)
	}
	r := looptest.StartReader(t, l.Name, 1, 4096)
	eventually.True(t, 10*time.Second, "10 reads", func() bool { return r.Reads() >= 10 })
	r.Stop(t)
	b, err := d.Read()
	if err != nil || b.ReadIOs < a.ReadIOs+10 {
		t.Fatalf("after 10 reads: %+v -> %+v, %v", a.Stat, b.Stat, err)
	}
	l.Remove(t)
	if s, err := d.Read(); !errors.Is(err, unix.ENODEV) || err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("after the disk's removal: %+v, %v", s, err)
	}
}
