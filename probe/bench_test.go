package probe

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
)

// BenchmarkIOUring measures random 4 KiB O_DIRECT reads at depth 32 on a
// /dev/shm-backed loop device (number 7391), through io_uring with
// registered buffers (READ_FIXED) and without (READ), and through psync with
// 8 readers for comparison: wall time (ns/read) and the process's CPU time
// (cpu-ns/read) per read. Root:
//
//	go test -run '^$' -bench IOUring -count 3 ./probe
func BenchmarkIOUring(b *testing.B) {
	looptest.Require(b)
	l := looptest.Add(b, 7391)
	l.Bind(b, 256<<20)
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
	}{
		{"registered", uring, 32, false},
		{"plain", uring, 32, true},
		{"psync8", psyncEngine{}, 8, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			// A run of b.N microseconds: the engines run to a deadline,
			// and the metric that matters is per read.
			j := &Job{FD: fd, BlockSize: 4096, Depth: tc.depth, Size: 256 << 20, PlainBuffers: tc.plain,
				Deadline: time.Now().Add(time.Duration(b.N) * time.Microsecond)}
			ctx := context.Background()
			b.ResetTimer()
			s, err := tc.e.Run(ctx, j)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(s.Elapsed.Nanoseconds())/float64(s.Reads), "ns/read")
			b.ReportMetric(float64(s.CPU.Nanoseconds())/float64(s.Reads), "cpu-ns/read")
		})
	}
}
