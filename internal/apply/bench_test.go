package apply

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
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
// plus noop: Applier.All when every disk is already in place (reads only);
// and the command as an admin runs it, a new process each op, its 1000 disks
// named on the command line, with a policy that matches only them:
//
//	process-switch: `iosched apply` switching all 1000;
//	process-noop:   `iosched apply` when every disk is already in place
//	                (reads only: what the CLI costs beyond the writes);
//	process-switch-1p-per-cpu: process-switch with GOMAXPROCS set to the
//	                CPUs (apply runs twice as many Ps otherwise);
//	raw-process:    raw-parallel in a process of its own, timed whole.
//
// Each op is 1000 switches (or 1000 disks checked). Run as root:
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
	plans := func(to string) []plan.Plan {
		ps := make([]plan.Plan, n)
		for i, name := range names {
			ps[i] = plan.Plan{Name: name, Changes: []plan.Change{{Attribute: "scheduler", To: to}}}
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

	bin, policies := buildIosched(b)
	runApply := func(b *testing.B, to string, env ...string) {
		cmd := exec.Command(bin, append([]string{"--policy", policies[to], "apply"}, names...)...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("iosched apply: %v\n%s", err, out)
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
	b.Run("process-switch", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			to := next()
			b.StartTimer()
			runApply(b, to)
			b.StopTimer()
			check(b, to)
		}
	})
	// As process-switch, with one P per CPU instead of apply's two.
	b.Run("process-switch-1p-per-cpu", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			to := next()
			b.StartTimer()
			runApply(b, to, fmt.Sprintf("GOMAXPROCS=%d", runtime.NumCPU()))
			b.StopTimer()
			check(b, to)
		}
	})
	b.Run("process-noop", func(b *testing.B) {
		current, _ := fs.ReadQueueAttr(names[0], "scheduler")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			runApply(b, current)
		}
		b.StopTimer()
		check(b, current)
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
	// raw-parallel as a process of its own, as apply runs: this test
	// binary run again as the writer (TestMain), timed from exec to exit,
	// so that it too starts a runtime and creates the threads its blocked
	// writes hold (raw-parallel reuses those earlier sub-benchmarks made).
	b.Run("raw-process", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			to := next()
			cmd := exec.Command(os.Args[0], names...)
			cmd.Env = append(os.Environ(), rawWriterEnv+"="+to)
			b.StartTimer()
			out, err := cmd.CombinedOutput()
			b.StopTimer()
			if err != nil {
				b.Fatalf("raw writer: %v\n%s", err, out)
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

// buildIosched builds the iosched command into a temporary directory, as a
// package ships it (static, stripped), and writes two policies matching
// only loops 30000-30999, one per scheduler the benchmark switches to.
func buildIosched(b *testing.B) (bin string, policies map[string]string) {
	dir := b.TempDir()
	bin = filepath.Join(dir, "iosched")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../../cmd/iosched")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ../cmd/iosched: %v\n%s", err, out)
	}
	policies = map[string]string{}
	for _, sched := range []string{"none", "mq-deadline"} {
		p := filepath.Join(dir, sched+".toml")
		text := fmt.Sprintf("[[rule]]\nname = \"bench loops\"\n[rule.match]\nname = \"loop30[0-9][0-9][0-9]\"\n[rule.set]\nscheduler = %q\n", sched)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
		policies[sched] = p
	}
	return bin, policies
}

// rawWriterEnv, set to a scheduler, makes this test binary the benchmark's
// raw writer process: it writes the scheduler of the loops named in its
// arguments, one goroutine each, all at once, and exits.
const rawWriterEnv = "IOSCHED_BENCH_RAW_WRITER"

func TestMain(m *testing.M) {
	if to := os.Getenv(rawWriterEnv); to != "" {
		os.Exit(rawWriter(to, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func rawWriter(to string, names []string) int {
	// The loops the benchmark creates are the only ones it will touch.
	benchLoop := regexp.MustCompile(`^loop30[0-9]{3}$`)
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, name := range names {
		if !benchLoop.MatchString(name) {
			fmt.Fprintf(os.Stderr, "raw writer: %s is not one of the benchmark's loops (30000-30999)\n", name)
			return 2
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fs.WriteQueueAttr(name, "scheduler", to); err != nil {
				fmt.Fprintln(os.Stderr, err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		return 1
	}
	return 0
}
