package diskemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The overhead of the scheduler the loop runs is added to each read's
// service time, and follows the loop's queue/scheduler as it changes.
func TestOverheadFollowsTheScheduler(t *testing.T) {
	t.Parallel()
	p := Profile{Name: "x", Service: Dist{Kind: "fixed", Mean: time.Millisecond}, Parallel: 1,
		Overhead: map[string]time.Duration{"mq-deadline": 20 * time.Millisecond}}
	d, err := New(p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	setSched := func(line string) {
		if err := os.WriteFile(filepath.Join(sys, "queue", "scheduler"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setSched("[none] mq-deadline kyber\n")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		FollowScheduler(d, sys, time.Millisecond, stop)
	}()
	defer func() { close(stop); <-done }()
	read := func() time.Duration {
		start := time.Now()
		d.Read(0, 4096)
		return time.Since(start)
	}
	waitOverhead := func(want time.Duration) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Duration(d.overhead.Load()) != want {
			if time.Now().After(deadline) {
				t.Fatalf("overhead %v, want %v", time.Duration(d.overhead.Load()), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitOverhead(0)
	setSched("none [mq-deadline] kyber\n")
	waitOverhead(20 * time.Millisecond)
	// 1 ms of service and 20 of overhead; the sleeper ends a read up to
	// lateCap early (it aims early by its average lateness).
	if got := read(); got < 21*time.Millisecond-lateCap {
		t.Errorf("a read under mq-deadline took %v, want at least %v", got, 21*time.Millisecond-lateCap)
	}
	setSched("[none] mq-deadline kyber\n")
	waitOverhead(0)
}

// SetCredits(0) has the credits run out now: the reads pass at the
// baseline rate from then on.
func TestSetCredits(t *testing.T) {
	t.Parallel()
	p := Profile{Name: "x", Service: Dist{Kind: "fixed"}, Parallel: 4,
		IOPS: []Bucket{{Rate: 10000, Burst: 100}, {Rate: 100, Burst: 1e6}}}
	d, err := New(p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	reads := func(n int) time.Duration {
		start := time.Now()
		for range n {
			d.Read(0, 4096)
		}
		return time.Since(start)
	}
	reads(20)
	if left, err := d.SetCredits(0); err != nil || left != 0 || d.iops[1].tokens != 0 {
		t.Fatalf("SetCredits(0) = %v, %v; the credit bucket holds %v", left, err, d.iops[1].tokens)
	}
	// At 100 a second, the first read waits for its token too: the sixth
	// is due 60 ms on, and the sleeper ends a read at most lateCap early.
	if got := reads(6); got < 60*time.Millisecond-lateCap {
		t.Errorf("6 reads without credits took %v, want at least %v (100 IOPS)", got, 60*time.Millisecond-lateCap)
	}
	if left, err := d.SetCredits(2e6); err != nil || left != 1e6 {
		t.Errorf("SetCredits past the burst = %v, %v; want the burst", left, err)
	}
	if _, err := d.SetCredits(-1); err == nil {
		t.Error("SetCredits(-1) accepted")
	}
	free, _ := New(Profile{Name: "free", Service: Dist{Kind: "fixed"}, Parallel: 1}, 1<<20)
	defer free.Close()
	if _, err := free.SetCredits(0); err == nil || !strings.Contains(err.Error(), `"free" has no IOPS bucket`) {
		t.Errorf("SetCredits on a disk without buckets: %v", err)
	}
}

func TestActiveScheduler(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"none [mq-deadline] kyber\n": "mq-deadline",
		"[none] mq-deadline\n":       "none",
		"none\n":                     "none",
		"":                           "",
		"none mq-deadline\n":         "",
	} {
		if got := activeScheduler(in); got != want {
			t.Errorf("activeScheduler(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSlowedOverhead(t *testing.T) {
	t.Parallel()
	p := mustLookup(t, "network-ssd")
	p.Overhead = map[string]time.Duration{"none": time.Millisecond}
	q := p.Slowed(15)
	if q.Overhead["none"] != 15*time.Millisecond || p.Overhead["none"] != time.Millisecond {
		t.Errorf("slowed overhead %v, original %v", q.Overhead, p.Overhead)
	}
}
