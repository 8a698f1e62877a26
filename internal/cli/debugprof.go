// The daemon writes its pprof profiles to a directory named by an
// environment variable, for measuring it under a benchmark
// (contrib/bench/README.md) without a network port: nothing is started
// unless the variable is set.

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// debugProfileEnv names the directory the profiles are written to.
const debugProfileEnv = "IOSCHED_PROFILE_DIR"

// Start, when debugProfileEnv is set, starts a CPU profile and records blocking and
// mutex contention; stop writes cpu.pprof, block.pprof, mutex.pprof,
// heap.pprof, goroutine.pprof and threadcreate.pprof there. Without the
// variable both do nothing.
func startDebugProfile() (stop func() error, err error) {
	dir := os.Getenv(debugProfileEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", debugProfileEnv, err)
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", debugProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("%s: %w", debugProfileEnv, err)
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
			errs = append(errs, writeProfile(dir, name))
		}
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		return nil
	}, nil
}

func writeProfile(dir, name string) error {
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
