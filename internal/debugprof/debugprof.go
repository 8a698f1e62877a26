// Package debugprof writes a process's pprof profiles to a directory named
// by an environment variable, for measuring the daemon under a benchmark
// (contrib/bench/README.md) without a network port: nothing is started
// unless the variable is set.
package debugprof

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// EnvVar names the directory the profiles are written to.
const EnvVar = "IOSCHED_PROFILE_DIR"

// Start, when EnvVar is set, starts a CPU profile and records blocking and
// mutex contention; stop writes cpu.pprof, block.pprof, mutex.pprof,
// heap.pprof, goroutine.pprof and threadcreate.pprof there. Without the
// variable both do nothing.
func Start() (stop func() error, err error) {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	// Every blocking event of 10 µs or more, every contended mutex, and
	// an allocation sample every 4 KiB (the default, 512 KiB, sees a few
	// samples in a burst of 1000 disks).
	runtime.MemProfileRate = 4096
	runtime.SetBlockProfileRate(10_000)
	runtime.SetMutexProfileFraction(1)
	return func() error {
		pprof.StopCPUProfile()
		errs := []error{cpu.Close()}
		for _, name := range []string{"block", "mutex", "heap", "goroutine", "threadcreate"} {
			errs = append(errs, write(dir, name))
		}
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		return nil
	}, nil
}

func write(dir, name string) error {
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
