package diskemu

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
)

// Emulated is an emulated disk a test runs: loop device Name over a FUSE
// file served by a child process (contrib/diskemu, built without the race
// detector: under -race the server's CPU cost per read grows several times
// and a test's own load would slow the disk it measures).
type Emulated struct {
	Name    string // "loop7500"
	Profile Profile
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	exited  chan struct{}
}

// Start runs profile p as loop device n (in the caller's range of
// internal/looptest) of size bytes, and stops it when the test ends. Root;
// a machine without /dev/fuse or the go command fails or skips t as
// looptest.Missing does.
func Start(t testing.TB, n int, p Profile, size int64) *Emulated {
	t.Helper()
	looptest.Require(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		looptest.Missing(t, "an emulated disk is served through FUSE: "+err.Error())
	}
	if _, err := exec.LookPath("go"); err != nil {
		looptest.Missing(t, "an emulated disk's server is built with the go command: "+err.Error())
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	bin, err := binary()
	if err != nil {
		t.Fatalf("building the disk emulator: %v", err)
	}
	spec, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--profile-json", string(spec), "--loop", strconv.Itoa(n),
		"--size", strconv.FormatInt(size, 10), "--dir", t.TempDir(), "--exit-on-stdin-eof")
	// A test that dies takes its disk with it: the child stops when its
	// standard input closes, which the kernel does when this process ends
	// however it ends. Not Pdeathsig: the kernel sends that when the OS
	// thread that started the child exits (prctl(2), PR_SET_PDEATHSIG),
	// and threads of a Go process exit while it runs (the daemon's
	// procs.ReleaseThreads ends idle ones), which would stop the disk in
	// the middle of a test.
	cmd.Stderr = &testWriter{t: t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &Emulated{Name: looptest.Name(n), Profile: p, cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
		close(e.lines)
	}()
	go func() {
		_ = cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() { e.stop(t, n) })
	line, ok := <-e.lines
	if !ok || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("the disk emulator for %s did not start (first line %q; its errors are above)", p.Name, line)
	}
	return e
}

// StartIn runs profile p as the lowest-numbered loop device of first..last
// (the caller's range of internal/looptest) that does not exist yet, so a
// test that starts several disks takes numbers only from its own range,
// never past it. It fails t when every number of the range is taken.
func StartIn(t testing.TB, first, last int, p Profile, size int64) *Emulated {
	t.Helper()
	if first < MinLoop || last < first {
		t.Fatalf("loop range %d-%d: want %d <= first <= last", first, last, MinLoop)
	}
	for n := first; n <= last; n++ {
		if _, err := os.Stat("/sys/block/" + looptest.Name(n)); errors.Is(err, os.ErrNotExist) {
			return Start(t, n, p, size)
		}
	}
	t.Fatalf("every loop device of %d-%d exists: no number left in the range for %s", first, last, p.Name)
	return nil
}

// stop asks the child to stop (it removes its loop and unmounts), and
// removes the loop itself if the child could not.
func (e *Emulated) stop(t testing.TB, n int) {
	t.Helper()
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(time.Minute):
		t.Errorf("the disk emulator of %s did not stop in a minute; killing it", e.Name)
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
	e.stdin.Close()
	if _, err := os.Stat("/sys/block/" + e.Name); err == nil {
		t.Errorf("%s outlived its emulator; removing it", e.Name)
		_ = Detach(n)
	}
}

// Refill gives the disk full buckets again, as a new disk's, and returns
// what it served since the last Refill's count of reads in service.
func (e *Emulated) Refill(t testing.TB) Stats {
	t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatalf("the disk emulator of %s: %v", e.Name, err)
	}
	for line := range e.lines {
		if rest, ok := strings.CutPrefix(line, "refilled "); ok {
			st, err := parseStats(rest)
			if err != nil {
				t.Fatalf("the disk emulator of %s: %v", e.Name, err)
			}
			return st
		}
	}
	t.Fatalf("the disk emulator of %s stopped", e.Name)
	return Stats{}
}

// SetCredits leaves n burst credits on the disk (Disk.SetCredits): 0 has
// its credits run out now. It returns the credits left.
func (e *Emulated) SetCredits(t testing.TB, n float64) float64 {
	t.Helper()
	if _, err := fmt.Fprintf(e.stdin, "credits %g\n", n); err != nil {
		t.Fatalf("the disk emulator of %s: %v", e.Name, err)
	}
	for line := range e.lines {
		if rest, ok := strings.CutPrefix(line, "credits "); ok {
			left, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("the disk emulator of %s: %q", e.Name, line)
			}
			return left
		}
		if rest, ok := strings.CutPrefix(line, "error "); ok {
			t.Fatalf("the disk emulator of %s: %s", e.Name, rest)
		}
	}
	t.Fatalf("the disk emulator of %s stopped", e.Name)
	return 0
}

// parseStats reads what the emulator prints: reads=N inside_ns=N
// peak_in_service=N.
func parseStats(s string) (Stats, error) {
	var st Stats
	var inside int64
	if _, err := fmt.Sscanf(s, "reads=%d inside_ns=%d peak_in_service=%d", &st.Reads, &inside, &st.PeakInService); err != nil {
		return st, fmt.Errorf("stats line %q: %w", s, err)
	}
	st.Inside = time.Duration(inside)
	return st, nil
}

var build struct {
	once sync.Once
	path string
	err  error
}

// binary builds contrib/diskemu once a process, into a file named after
// the module's directory in the temporary directory (so repeated runs
// reuse one file and the build cache makes it quick).
func binary() (string, error) {
	build.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			build.err = err
			return
		}
		sum := sha256.Sum256([]byte(root))
		dst := filepath.Join(os.TempDir(), "iosched-diskemu-"+hex.EncodeToString(sum[:6]))
		tmp := fmt.Sprintf("%s.%d", dst, os.Getpid())
		cmd := exec.Command("go", "build", "-o", tmp, "./contrib/diskemu")
		cmd.Dir = root
		// No -race from the environment: the server must not pay for it.
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./contrib/diskemu: %v\n%s", err, out)
			return
		}
		build.path, build.err = dst, os.Rename(tmp, dst)
	})
	return build.path, build.err
}

// moduleRoot is the directory of iosched's go.mod above the working
// directory (a test runs in its package's directory, perhaps in a module
// of its own under contrib/).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/iosched/iosched\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/iosched/iosched above the working directory")
		}
		dir = parent
	}
}

// testWriter logs the child's standard error to the test.
type testWriter struct{ t testing.TB }

func (w *testWriter) Write(b []byte) (int, error) {
	w.t.Logf("diskemu: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
