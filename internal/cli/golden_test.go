package cli

// The golden-file harness shared by the cli tests (list, plan, apply,
// explain, ...): run a command in-process, compare its output with a file
// under testdata/golden/ at the repository root, and rewrite the files with
//
//	go test ./cli -run Golden -update
//
// Golden output must be byte-stable across machines: run commands from the
// repository root (inRepoRoot) with relative --sysfs and --dev paths, so no
// absolute path, and nothing else machine-specific, reaches the output.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden files with the output the tests get")

// golden compares got with testdata/golden/<name>, or writes got there when
// the test runs with -update. name is a slash-separated path below
// testdata/golden ("list.txt", "plan/cloud.json").
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	if name == "" || filepath.IsAbs(name) || strings.Contains(name, "..") || strings.Contains(name, "\\") {
		t.Fatalf("golden: bad file name %q", name)
	}
	path := filepath.Join(repoRoot(t), "testdata", "golden", filepath.FromSlash(name))
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("golden: wrote %s", name)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (create it with: go test ./cli -run '%s' -update)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from testdata/golden/%s (-want +got):\n%s\nif the new output is right: go test ./cli -run '%s' -update",
			name, lineDiff(want, got), t.Name())
	}
}

// repoRoot is the directory holding go.mod, found upwards from the test's
// working directory (the package directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repoRoot: no go.mod above the working directory")
		}
		dir = parent
	}
}

// inRepoRoot makes the repository root the working directory for the rest
// of the test, so commands take (and print) paths such as
// testdata/sysfs/cloud exactly as a developer types them. It changes the
// whole process's directory: a test that calls it cannot be parallel.
func inRepoRoot(t *testing.T) {
	t.Helper()
	t.Chdir(repoRoot(t))
}

// runMain runs iosched with args in-process and returns what it printed and
// its exit code.
func runMain(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	if !slices.Contains(args, "--lock-file") {
		// The disks' lock of the test's own, not the machine's.
		args = append([]string{"--lock-file", filepath.Join(t.TempDir(), "disks.lock")}, args...)
	}
	code = Main(args, &out, &errb)
	return out.Bytes(), errb.Bytes(), code
}

// lineDiff shows where two texts differ, line by line (a longest common
// subsequence: golden files are small).
func lineDiff(want, got []byte) string {
	a, b := splitLines(want), splitLines(got)
	if len(a)*len(b) > 4_000_000 {
		return fmt.Sprintf("(too long to diff: %d and %d lines)", len(a), len(b))
	}
	// lcs[i][j] is the length of the LCS of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	line := func(prefix string, n int, s string) {
		fmt.Fprintf(&sb, "%s%d: %s", prefix, n+1, strings.TrimSuffix(s, "\n"))
		if !strings.HasSuffix(s, "\n") {
			sb.WriteString(" (no newline at end)")
		}
		sb.WriteByte('\n')
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			line("-", i, a[i])
			i++
		default:
			line("+", j, b[j])
			j++
		}
	}
	return sb.String()
}

// splitLines splits after each newline; a last line without one is kept.
func splitLines(b []byte) []string {
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
