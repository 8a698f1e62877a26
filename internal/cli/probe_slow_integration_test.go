package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers 7650-7689 (see internal/looptest).

// buildIosched builds the real binary, with cgo as `go install` does or
// without as the packages do.
func buildIosched(t *testing.T, cgo bool) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "iosched")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/iosched")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/iosched: %v\n%s", err, out)
	}
	return bin
}

// binResult is what a run of the real binary did.
type binResult struct {
	stdout, stderr []byte
	code           int
	signal         syscall.Signal // the signal that ended it, or 0
	// sinceFirst is the time from its first line on stderr to its exit.
	sinceFirst time.Duration
}

// runBin runs the binary (after prefix, e.g. prlimit and its options)
// with the test's own disks' lock.
func runBin(t *testing.T, prefix []string, bin string, args ...string) binResult {
	t.Helper()
	argv := slices.Concat(prefix, []string{bin, "--lock-file", filepath.Join(t.TempDir(), "disks.lock")}, args)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	var first time.Time
	sc := bufio.NewReader(errPipe)
	for {
		line, err := sc.ReadBytes('\n')
		if first.IsZero() && len(line) > 0 {
			first = time.Now()
		}
		errb.Write(line)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Error(err)
			}
			break
		}
	}
	err = cmd.Wait()
	r := binResult{stdout: out.Bytes(), stderr: errb.Bytes(), sinceFirst: time.Since(first)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal()
		}
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// announcedRE finds the bound in the line that announces it, once the
// disk is sized.
var announcedRE = regexp.MustCompile(`(?m)^probing .*: at most ([0-9.]+)s$`)

// TestIntegrationProbeSlowDisk probes, with the real binary, loop devices
// over FUSE files whose every read takes 1 ms, 5 ms or 20 ms, served one
// at a time: the default probe at 1 and 5 ms, and one at depth 32 at 20 ms
// (32 reads in flight take 640 ms to drain). Each must finish, with a
// result, within the bound it announced, having dropped the depths past
// where IOPS stopped growing; at 20 ms the disk must not be reported as
// not answering. A second default probe finds the result remembered.
// (Before, the budget counted no drain: at 1 and 5 ms the probe ran out
// of it every time, exit 1 after 14 s of load; at 20 ms a fixed 500 ms
// grace called the draining disk dead.)
func TestIntegrationProbeSlowDisk(t *testing.T) {
	looptest.Require(t)
	bin := buildIosched(t, true)
	fs, _ := sysfs.NewFS("/sys")
	for i, tc := range []struct {
		perRead time.Duration
		args    []string
		// keep: a depth the probe must measure; drop: one it must not.
		keep, drop int
	}{
		{perRead: time.Millisecond, keep: 4, drop: 64},
		{perRead: 5 * time.Millisecond, keep: 4, drop: 64},
		{perRead: 20 * time.Millisecond, args: []string{"--depth", "32", "--depths", "1,32", "--rounds", "1", "--duration", "1s"}, keep: 32},
	} {
		t.Run(tc.perRead.String(), func(t *testing.T) {
			l := looptest.AddSlow(t, 7650+i, 64<<20, tc.perRead)
			orig := kyberOrBFQ(t, fs, l.Name)
			state := t.TempDir()
			args := slices.Concat([]string{"probe", l.Name, "--state-dir", state}, tc.args)
			r := runBin(t, nil, bin, append(args, "--fresh", "--json")...)
			t.Logf("%s", r.stderr)
			if r.code != 0 {
				t.Fatalf("exit %d (signal %v)\n%s", r.code, r.signal, r.stderr)
			}
			if strings.Contains(string(r.stderr), "does not answer") {
				t.Errorf("a slow disk was reported as not answering:\n%s", r.stderr)
			}
			var rep struct {
				Depth    int     `json:"depth"`
				Depths   []int   `json:"depths"`
				FlatAt   int     `json:"flat_at"`
				BudgetS  float64 `json:"budget_s"`
				ElapsedS float64 `json:"elapsed_s"`
				Restored bool    `json:"restored"`
				Winner   string  `json:"winner"`
			}
			if err := json.Unmarshal(r.stdout, &rep); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
			m := announcedRE.FindSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("no bound announced:\n%s", r.stderr)
			}
			announced, _ := strconv.ParseFloat(string(m[1]), 64)
			// The bound printed is the budget, rounded to 100 ms.
			if rep.BudgetS <= 0 || announced < rep.BudgetS-0.051 || announced > rep.BudgetS+0.051 {
				t.Errorf("announced %.1fs, report's budget %.3fs", announced, rep.BudgetS)
			}
			t.Logf("took %.2fs of a %.2fs budget; depths %v, deep %d", rep.ElapsedS, rep.BudgetS, rep.Depths, rep.Depth)
			if rep.ElapsedS <= 0 || rep.ElapsedS > rep.BudgetS {
				t.Errorf("took %.2fs of a %.2fs budget", rep.ElapsedS, rep.BudgetS)
			}
			// From its first line to its exit: the bound, and the
			// printing of the result and the process's exit after it.
			if limit := time.Duration(rep.BudgetS*float64(time.Second)) + time.Second; r.sinceFirst > limit {
				t.Errorf("the process exited %s after its first line, its bound %.1fs", r.sinceFirst, rep.BudgetS)
			}
			if !rep.Restored || rep.Winner == "" {
				t.Errorf("restored %v, winner %q", rep.Restored, rep.Winner)
			}
			if !slices.Contains(rep.Depths, tc.keep) {
				t.Errorf("depths %v lack %d", rep.Depths, tc.keep)
			}
			if tc.drop != 0 && (slices.Contains(rep.Depths, tc.drop) || rep.Depth >= tc.drop || rep.FlatAt == 0) {
				t.Errorf("depths %v, deep %d, flat at %d: IOPS does not grow past one read at a time, yet %d was measured", rep.Depths, rep.Depth, rep.FlatAt, tc.drop)
			}
			if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur != orig {
				t.Errorf("scheduler %s after the probe, want %s", cur, orig)
			}
			if tc.drop == 0 || i != 1 {
				return
			}
			// Remembered under the depths asked for, though measured at
			// fewer: the next probe reads nothing.
			before, _ := os.ReadFile("/sys/block/" + l.Name + "/stat")
			r = runBin(t, nil, bin, args...)
			if r.code != 0 || !strings.Contains(string(r.stdout), "remembered") {
				t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			after, _ := os.ReadFile("/sys/block/" + l.Name + "/stat")
			if !bytes.Equal(before, after) {
				t.Errorf("a remembered result read the disk: stat %q -> %q", before, after)
			}
		})
	}
}

// TestIntegrationProbeAddressSpace: under `ulimit -v 2000000` a psync
// probe at depth 64 of the real binary built with cgo (64 threads of
// pthread stacks and malloc arenas) fails with an error that names the
// limit and what to change, instead of the runtime aborting the process
// (SIGABRT), and the disk keeps its scheduler; the change it suggests
// works under the same limit. The binary built without cgo, as the
// packages are, probes under it, or refuses as clearly.
func TestIntegrationProbeAddressSpace(t *testing.T) {
	looptest.Require(t)
	if _, err := exec.LookPath("prlimit"); err != nil {
		looptest.Missing(t, "prlimit (util-linux) is needed to limit the probe's address space: "+err.Error())
	}
	fs, _ := sysfs.NewFS("/sys")
	limit := []string{"prlimit", "--as=2048000000", "--"} // ulimit -v 2000000 (KiB)
	l := looptest.Add(t, 7660)
	l.Bind(t, 64<<20)
	orig := kyberOrBFQ(t, fs, l.Name)
	state := t.TempDir()
	base := []string{"probe", l.Name, "--state-dir", state, "--fresh", "--duration", "50ms", "--rounds", "1"}
	args := append(slices.Clip(base), "--engine", "psync")

	bin := buildIosched(t, true)
	r := runBin(t, limit, bin, args...)
	if r.signal != 0 || r.code != 1 {
		t.Fatalf("exit %d, signal %v, want exit 1\n%s", r.code, r.signal, r.stderr)
	}
	for _, want := range []string{"RLIMIT_AS", "ulimit -v", "--engine io_uring"} {
		if !strings.Contains(string(r.stderr), want) {
			t.Errorf("the error does not say %q:\n%s", want, r.stderr)
		}
	}
	if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur != orig {
		t.Errorf("scheduler %s after the refusal, want %s", cur, orig)
	}
	// What it says to do works under the same limit.
	fix := [][]string{append(slices.Clip(base), "--engine", "io_uring")}
	if m := regexp.MustCompile(`depths up to (\d+)`).FindSubmatch(r.stderr); m != nil {
		fix = append(fix, slices.Concat(args, []string{"--depth", string(m[1]), "--depths", "1," + string(m[1])}))
	}
	for _, f := range fix {
		if r := runBin(t, limit, bin, f...); r.code != 0 {
			t.Errorf("%v, as the error advised: exit %d, signal %v\n%s", f, r.code, r.signal, r.stderr)
		}
	}

	r = runBin(t, limit, buildIosched(t, false), args...)
	if r.signal != 0 || (r.code != 0 && !strings.Contains(string(r.stderr), "RLIMIT_AS")) {
		t.Errorf("without cgo: exit %d, signal %v\n%s", r.code, r.signal, r.stderr)
	}
	if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur != orig {
		t.Errorf("scheduler %s at the end, want %s", cur, orig)
	}
}
