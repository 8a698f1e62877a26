package probe

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/procs"
)

// BenchmarkIOUring measures random 4 KiB O_DIRECT reads at depth 32 on a
// /dev/shm-backed loop device (number 7391), through io_uring with
// registered buffers (READ_FIXED) and without (READ), and submitting the
// reads a wait freed with the next wait (submit-with-wait), and through
// psync with 8 readers, yielding and not, with the goroutines it asks its
// caller for (Runner.Procs: what the daemon and `iosched probe` give it)
// and without (psync8-own-procs: GOMAXPROCS as the process has it): reads
// a second, wall time (ns/read) and the process's CPU time (cpu-ns/read)
// per read. Root:
//
//	go test -run '^$' -bench IOUring -benchtime 2000000x -count 5 ./probe
func BenchmarkIOUring(b *testing.B) {
	looptest.Require(b)
	l := looptest.Add(b, 7391)
	l.Bind(b, 256<<20)
	// Data, not holes: a hole in a tmpfs file is read from one shared
	// zero page, which makes the device's copying cheaper than real data.
	f, err := os.OpenFile(l.Backing, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{1}), 256<<20)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	uring, err := NewEngine(EngineIOUring)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		e     Engine
		depth int
		plain bool
		// before: the one change of the engine's earlier way this
		// variant puts back (Job.SubmitWithWait, NoYield)
		before bool
		// ownProcs: GOMAXPROCS left as it is, not raised as the
		// engine's table entry asks its caller to
		ownProcs bool
	}{
		{"registered", uring, 32, false, false, false},
		{"plain", uring, 32, true, false, false},
		{"submit-with-wait", uring, 32, false, true, false},
		{"psync8", psyncEngine{}, 8, false, false, false},
		{"psync8-no-yield", psyncEngine{}, 8, false, true, false},
		{"psync8-own-procs", psyncEngine{}, 8, false, false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if spec, _ := engineSpecOf(tc.e.Name()); spec.procs != nil && !tc.ownProcs {
				var procs procs.Raiser
				defer procs.Raise(spec.procs(tc.depth))()
			}
			// A run of b.N microseconds: the engines run to a deadline,
			// and the metric that matters is per read.
			j := &Job{FD: fd, BlockSize: 4096, Depth: tc.depth, Size: 256 << 20, PlainBuffers: tc.plain,
				SubmitWithWait: tc.before, NoYield: tc.before,
				Deadline: time.Now().Add(time.Duration(b.N) * time.Microsecond)}
			ctx := context.Background()
			b.ResetTimer()
			s, err := tc.e.Run(ctx, j)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(s.Reads)/s.Elapsed.Seconds(), "reads/s")
			b.ReportMetric(float64(s.Elapsed.Nanoseconds())/float64(s.Reads), "ns/read")
			b.ReportMetric(float64(s.CPU.Nanoseconds())/float64(s.Reads), "cpu-ns/read")
		})
	}
}
