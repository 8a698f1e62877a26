package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An error that errors.Join made (here: two unreadable seed files of
// [daemon] probe_results, and a probes.json that cannot be read) is
// printed one error a line, not as one line with a literal \x0a between
// them; a control byte in it is still escaped.
func TestJoinedErrorsPrintOneALine(t *testing.T) {
	inRepoRoot(t)
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds")
	if err := os.Mkdir(seeds, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a.json", "b\x1b.json"} {
		if err := os.WriteFile(filepath.Join(seeds, n), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "probes.json"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.toml")
	text := probePolicyText + fmt.Sprintf("\n[daemon]\nprobe_results = [%q]\n", filepath.Join(seeds, "*.json"))
	if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, code := runMain(t, "--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--policy", pol, "explain", "vda", "--state-dir", state)
	all := string(out) + string(errb)
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s", code, all)
	}
	if strings.Contains(all, `\x0a`) {
		t.Errorf("a joined error printed with a literal \\x0a:\n%s", all)
	}
	lines := 0
	for _, l := range strings.Split(all, "\n") {
		if strings.Contains(l, "a.json") || strings.Contains(l, `b\x1b.json`) {
			lines++
		}
	}
	if lines != 2 {
		t.Errorf("want each seed file's error on a line of its own (2 lines), got %d:\n%s", lines, all)
	}
	if strings.Contains(all, "\x1b") {
		t.Errorf("an ESC reached the output raw:\n%q", all)
	}
}
