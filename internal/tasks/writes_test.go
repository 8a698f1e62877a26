package tasks

import (
	"errors"
	"testing"
)

// TestGoRecordsUntilTheWriteReturns: a write is listed, under its disk,
// from the moment Go starts it until it has returned, and its error comes
// on the channel.
func TestGoRecordsUntilTheWriteReturns(t *testing.T) {
	t.Parallel()
	changes := make(chan struct{}, 8)
	w := NewWrites(func() { changes <- struct{}{} })
	unblock := make(chan struct{})
	failed := errors.New("the kernel refused it")
	s := w.Go("loop1", "scheduler bfq", func() error {
		<-unblock
		return failed
	})
	<-changes
	got := w.Of("loop1")
	if len(got) != 1 || got[0].Disk != "loop1" || got[0].What != "scheduler bfq" || got[0].Since.IsZero() {
		t.Fatalf("while the write waits: %+v, want the one write to loop1", got)
	}
	if other := w.Of("loop2"); len(other) != 0 {
		t.Errorf("another disk lists %+v", other)
	}
	close(unblock)
	<-s.Done()
	if err := s.Err(); !errors.Is(err, failed) {
		t.Errorf("the write's error: %v, want %v", err, failed)
	}
	if all := w.All(); len(all) != 0 {
		t.Errorf("after the write returned: %+v, want none", all)
	}
}

// TestAddAndAll: writes running elsewhere are recorded until done; All
// lists them by disk; done twice forgets once.
func TestAddAndAll(t *testing.T) {
	t.Parallel()
	w := NewWrites(nil)
	doneB := w.Add("loopB", "restore")
	doneA := w.Add("loopA", "restore")
	all := w.All()
	if len(all) != 2 || all[0].Disk != "loopA" || all[1].Disk != "loopB" {
		t.Fatalf("All = %+v, want loopA then loopB", all)
	}
	doneA()
	doneA()
	if all := w.All(); len(all) != 1 || all[0].Disk != "loopB" {
		t.Errorf("after loopA's write returned: %+v, want loopB's alone", all)
	}
	doneB()
	if all := w.All(); len(all) != 0 {
		t.Errorf("after both returned: %+v", all)
	}
}

// TestNilRecordsNothing: a nil *Writes (a CLI probe) still runs the write.
func TestNilRecordsNothing(t *testing.T) {
	t.Parallel()
	var w *Writes
	if err := w.Go("loop1", "restore", func() error { return nil }).Err(); err != nil {
		t.Fatal(err)
	}
	if w.All() != nil || w.Of("loop1") != nil {
		t.Error("a nil record lists writes")
	}
	w.Add("loop1", "restore")()
}
