package apply

import (
	"context"
	"sync"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/plan"
)

// BenchmarkIntegrationSchedulerSwitch1000 switches the scheduler of 1000 real
// loop devices (numbers 30000-30999) back and forth, three ways in one run:
//
//	applier:      Applier.All, as `iosched apply` does it;
//	raw-parallel: one goroutine per disk writing queue/scheduler directly,
//	              the kernel's limit (grace periods overlap);
//	sequential:   a plain loop of writes, one disk after another, as a udev
//	              RUN+= script or tuned does it.
//
// plus noop: Applier.All when every disk is already in place (reads only).
// Each op is 1000 switches. Run as root:
//
//	go test -run '^$' -bench SchedulerSwitch1000 -benchtime 3x ./apply
func BenchmarkIntegrationSchedulerSwitch1000(b *testing.B) {
	looptest.Require(b)
	const first, n = 30000, 1000
	names := make([]string, n)
	for i := range names {
		if err := looptest.AddRaw(first + i); err != nil {
			b.Fatalf("LOOP_CTL_ADD %d: %v", first+i, err)
		}
		names[i] = looptest.Name(first + i)
	}
	b.Cleanup(func() {
		for i := range names {
			if err := looptest.RemoveRaw(first + i); err != nil {
				b.Errorf("LOOP_CTL_REMOVE %d: %v", first+i, err)
			}
		}
	})
	fs := realFS(b)
	// next is the scheduler the disks are not running now.
	next := func() string {
		if cur, _ := fs.ReadQueueAttr(names[0], "scheduler"); cur == "none" {
			return "mq-deadline"
		}
		return "none"
	}
	plans := func(to string) []plan.Device {
		ps := make([]plan.Device, n)
		for i, name := range names {
			ps[i] = plan.Device{Name: name, Changes: []plan.Change{{Attribute: "scheduler", To: to}}}
		}
		return ps
	}
	check := func(b *testing.B, want string) {
		for _, name := range names {
			if got, err := fs.ReadQueueAttr(name, "scheduler"); err != nil || got != want {
				b.Fatalf("%s scheduler %q %v, want %q", name, got, err, want)
			}
		}
	}

	b.Run("applier", func(b *testing.B) {
		b.StopTimer()
		a := &Applier{FS: fs}
		for i := 0; i < b.N; i++ {
			to := next()
			ps := plans(to)
			b.StartTimer()
			rs := a.All(context.Background(), ps)
			b.StopTimer()
			for _, r := range rs {
				if r.Failed() || r.Writes != 1 {
					b.Fatalf("%s: %+v", r.Device, r)
				}
			}
			check(b, to)
		}
	})
	b.Run("noop", func(b *testing.B) {
		a := &Applier{FS: fs}
		current, _ := fs.ReadQueueAttr(names[0], "scheduler")
		ps := plans(current)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, r := range a.All(context.Background(), ps) {
				if r.Writes != 0 {
					b.Fatalf("%s: %d writes on a disk already in place", r.Device, r.Writes)
				}
			}
		}
	})
	b.Run("raw-parallel", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			to := next()
			b.StartTimer()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for _, name := range names {
				wg.Add(1)
				go func(name string) {
					defer wg.Done()
					if err := fs.WriteQueueAttr(name, "scheduler", to); err != nil {
						errs <- err
					}
				}(name)
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			check(b, to)
		}
	})
	b.Run("sequential", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			to := next()
			b.StartTimer()
			for _, name := range names {
				if err := fs.WriteQueueAttr(name, "scheduler", to); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			check(b, to)
		}
	})
}
