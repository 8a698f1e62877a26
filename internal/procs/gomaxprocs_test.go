package procs

import (
	"runtime"
	"testing"
)

// Two users that overlap and end in either order leave GOMAXPROCS as it
// was before the first began, and it stays raised while either runs; a
// release called twice counts once.
func TestRaiseOverlapping(t *testing.T) {
	start := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(start)
	for _, firstEndsFirst := range []bool{true, false} {
		var r Raiser
		a := r.Raise(start + 8)
		b := r.Raise(start + 4)
		if got := runtime.GOMAXPROCS(0); got != start+8 {
			t.Fatalf("both running: GOMAXPROCS %d, want %d", got, start+8)
		}
		first, second := a, b
		if !firstEndsFirst {
			first, second = b, a
		}
		first()
		first()
		if got := runtime.GOMAXPROCS(0); got < start+4 {
			t.Errorf("one still running: GOMAXPROCS %d, want at least %d", got, start+4)
		}
		second()
		if got := runtime.GOMAXPROCS(0); got != start {
			t.Errorf("first ends first %v: GOMAXPROCS %d after both, want %d", firstEndsFirst, got, start)
		}
	}
}
