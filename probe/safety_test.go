package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iosched/iosched/sysfs"
)

// TestRecoverInterruptedTakesTheLock: a record whose disk's lock is held
// (a probe running) is left alone; once free, recovery deals with it
// under the lock and lets the lock go again.
func TestRecoverInterruptedTakesTheLock(t *testing.T) {
	fs, err := sysfs.NewFS("../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	rec := originalsPath(state, "loop0")
	if err := os.WriteFile(rec, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := takeLock(state, "loop0")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := RecoverInterrupted(state, fs); err != nil || len(got) != 0 {
		t.Fatalf("with the lock held: RecoverInterrupted = %+v, %v; want nothing touched", got, err)
	}
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("with the lock held the record must stay: %v", err)
	}
	held.release()

	got, err := RecoverInterrupted(state, fs)
	if err != nil || len(got) != 1 || got[0].Device != "loop0" || got[0].Err != nil || got[0].Note == "" {
		t.Fatalf("RecoverInterrupted = %+v, %v; want loop0's unreadable record dropped", got, err)
	}
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Fatalf("record still there after recovery: %v", err)
	}
	lk, err := takeLock(state, "loop0")
	if err != nil {
		t.Fatalf("recovery kept the lock: %v", err)
	}
	lk.release()
}

// TestExcludeAndTheLock: a writer's Exclude keeps a probe from taking the
// disk and is refused (busy) while a probe holds it; disks do not share a
// lock; a state directory where no lock can be made lets the writer go on.
// The locks live in one file, whatever the number of disks.
func TestExcludeAndTheLock(t *testing.T) {
	state := t.TempDir()
	release, err := Exclude(state, "vda")
	if err != nil {
		t.Fatalf("Exclude with no probe: %v", err)
	}
	if _, err := takeLock(state, "vda"); err == nil {
		t.Fatal("a probe took the disk while a writer held it")
	} else if !IsBusy(err) || !strings.Contains(err.Error(), "another probe of vda is running, or iosched is writing its settings") {
		t.Errorf("refusal: %v", err)
	}
	other, err := takeLock(state, "vdb")
	if err != nil {
		t.Fatalf("vdb's lock is taken with vda's: %v", err)
	}
	other.release()
	release()

	probe, err := takeLock(state, "vda")
	if err != nil {
		t.Fatal(err)
	}
	if release, err := Exclude(state, "vda"); !IsBusy(err) || release == nil {
		t.Errorf("Exclude while a probe holds the disk: %v, want busy", err)
	}
	if !Probing(state, "vda") || Probing(state, "vdb") {
		t.Errorf("Probing vda %v, vdb %v; want only vda", Probing(state, "vda"), Probing(state, "vdb"))
	}
	probe.release()
	if Probing(state, "vda") {
		t.Error("Probing after the probe let go")
	}
	if left, _ := filepath.Glob(filepath.Join(state, "*")); len(left) != 1 || filepath.Base(left[0]) != locksFile {
		t.Errorf("state directory holds %v, want only %s", left, locksFile)
	}

	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if release, err := Exclude(notDir, "vda"); err != nil || release == nil {
		t.Errorf("Exclude with a state directory that is a file: %v; the writer must go on", err)
	} else {
		release()
	}
}
