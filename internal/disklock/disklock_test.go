package disklock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocksExcludeEachOther: two Locks on one file (two processes, or a
// probe and the daemon's writers) exclude each other per disk; disks do not
// share a lock; one Locks refuses a disk it already holds; Held sees every
// holder; unlocking frees the disk; the file is the only thing made.
func TestLocksExcludeEachOther(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "disks.lock")
	writers, probe := New(path), New(path)
	defer writers.Close()
	defer probe.Close()

	if writers.Held("vda") {
		t.Fatal("Held before anyone locked")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("asking made the lock file: %v", err)
	}
	unlock, err := writers.LockToWrite("vda")
	if err != nil {
		t.Fatalf("LockToWrite with nobody holding: %v", err)
	}
	if _, err := probe.Lock("vda"); !IsBusy(err) || !strings.Contains(err.Error(), path) {
		t.Errorf("a probe locked vda while a writer held it: %v", err)
	}
	if _, err := writers.LockToWrite("vda"); !IsBusy(err) {
		t.Errorf("a second writer of this process locked vda: %v", err)
	}
	if !writers.Held("vda") || !probe.Held("vda") || probe.Held("vdb") {
		t.Errorf("Held vda %v/%v, vdb %v; want vda only", writers.Held("vda"), probe.Held("vda"), probe.Held("vdb"))
	}
	unlockB, err := probe.Lock("vdb")
	if err != nil {
		t.Fatalf("vdb's lock is taken with vda's: %v", err)
	}
	unlockB()
	unlock()
	unlock() // a second call does nothing
	if probe.Held("vda") {
		t.Error("Held after the writer let go")
	}

	unlockP, err := probe.Lock("vda")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writers.LockToWrite("vda"); !IsBusy(err) {
		t.Errorf("a writer locked vda while a probe held it: %v", err)
	}
	unlockP()
	if left, _ := filepath.Glob(filepath.Join(dir, "sub", "*")); len(left) != 1 || left[0] != path {
		t.Errorf("lock directory holds %v, want only %s", left, path)
	}
}

// TestLockWhereNoneCanBe: where the lock file cannot be made (its
// directory is a file), a writer goes on with a no-op lock, but a probe's
// Lock fails: a probe never runs unlocked.
func TestLockWhereNoneCanBe(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := New(filepath.Join(file, "disks.lock"))
	unlock, err := l.LockToWrite("vda")
	if err != nil || unlock == nil {
		t.Fatalf("LockToWrite where no lock can be: %v; the writer must go on", err)
	}
	unlock()
	if _, err := l.Lock("vda"); err == nil || IsBusy(err) {
		t.Errorf("Lock where no lock can be = %v, want an error that is not busy", err)
	}
}

// TestCloseWaitsForTheLastUnlock: a lock handed to a write still waiting on
// its disk stays held after Close, until it is unlocked.
func TestCloseWaitsForTheLastUnlock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "disks.lock")
	l, other := New(path), New(path)
	defer other.Close()
	unlock, err := l.Lock("vda")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if !other.Held("vda") {
		t.Fatal("Close dropped a lock still held")
	}
	unlock()
	if other.Held("vda") {
		t.Fatal("the lock outlived its unlock")
	}
	if _, err := l.Lock("vdb"); err == nil {
		t.Error("Lock through closed Locks succeeded")
	}
}
