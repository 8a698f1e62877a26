package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/originals"
	"github.com/iosched/iosched/internal/sysfs"
)

// testLocks is a lock file of the test's own, not the machine's.
func testLocks(t *testing.T) *disklock.Locks {
	l := disklock.New(filepath.Join(t.TempDir(), "disks.lock"))
	t.Cleanup(l.Close)
	return l
}

// TestRecoverInterruptedTakesTheLock: a record whose disk's lock is held
// (a probe running, in another process) is left alone; once free, recovery
// deals with it under the lock and lets the lock go again.
func TestRecoverInterruptedTakesTheLock(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	locks := testLocks(t)
	rec := originalsPath(state, "loop0")
	if err := os.WriteFile(rec, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := disklock.New(locks.Path())
	defer other.Close()
	unlock, err := other.Lock("loop0")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := RecoverInterrupted(state, locks, fs); err != nil || len(got) != 0 {
		t.Fatalf("with the lock held: RecoverInterrupted = %+v, %v; want nothing touched", got, err)
	}
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("with the lock held the record must stay: %v", err)
	}
	unlock()

	got, err := RecoverInterrupted(state, locks, fs)
	if err != nil || len(got) != 1 || got[0].Device != "loop0" || got[0].Err != nil || got[0].Note == "" {
		t.Fatalf("RecoverInterrupted = %+v, %v; want loop0's unreadable record dealt with", got, err)
	}
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Fatalf("record still there after recovery: %v", err)
	}
	if locks.Held("loop0") {
		t.Fatal("recovery kept the lock")
	}
}

// TestUnreadableRecordMovedAside: a corrupt record is not taken for
// nothing to restore: it is moved aside (listed by originals.Aside, which
// `status` shows), nothing is reported restored, and the note says to
// check by hand. (Before, it was deleted, and the next probe went on as if
// all was well.)
func TestUnreadableRecordMovedAside(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	rec := originalsPath(state, "loop0")
	if err := os.WriteFile(rec, []byte(`{"boot_id": "x", "disks": {"loop0": `), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := RecoverInterrupted(state, testLocks(t), fs)
	if err != nil || len(got) != 1 || got[0].Restored || got[0].Err != nil || got[0].Aside == "" ||
		!strings.Contains(got[0].Note, "unreadable") || !strings.Contains(got[0].Note, "by hand") {
		t.Fatalf("RecoverInterrupted = %+v, %v; want the record moved aside, nothing restored", got, err)
	}
	aside, err := originals.Aside(state)
	if err != nil || len(aside) != 1 || aside[0] != got[0].Aside {
		t.Fatalf("files aside: %v, %v; want %s", aside, err, got[0].Aside)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || !strings.HasPrefix(string(b), `{"boot_id": "x"`) {
		t.Errorf("moved aside: %q, %v; want the record as it was", b, err)
	}
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Errorf("the unreadable record is still in place: %v", err)
	}
}

// The depth a measurement saw is time_in_queue's change over its length,
// through the counter's 32-bit wrap.
func TestObservedDepth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		before, after uint64
		elapsed       time.Duration
		want          float64
	}{
		{1000, 33000, time.Second, 32},
		{1<<32 - 500, 1500, 500 * time.Millisecond, 4},
		{1 << 40, 5, time.Second, 0}, // went back: no depth
		{1000, 2000, 0, 0},
	} {
		got := observedDepth(observe.Stat{TimeInQueue: tc.before}, observe.Stat{TimeInQueue: tc.after}, tc.elapsed)
		if got != tc.want {
			t.Errorf("observedDepth(%d, %d, %s) = %v, want %v", tc.before, tc.after, tc.elapsed, got, tc.want)
		}
	}
}
