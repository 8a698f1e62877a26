package probe

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/disklock"
	"github.com/iosched/iosched/sysfs"
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
	fs, err := sysfs.NewFS("../testdata/sysfs/cloud")
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
