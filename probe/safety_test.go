package probe

import (
	"os"
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
