package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `iosched check` on a FIFO (or any file that is not a regular file) says
// so and exits 1 at once. Before, it blocked in open() until someone wrote
// to the FIFO.
func TestCheckRefusesAFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "policy.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main([]string{"--policy", fifo, "--sysfs", t.TempDir(), "check"}, &out, &errb)
		done <- result{code, errb.String()}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "not a regular file (a FIFO)") {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("iosched check did not return within 5 s")
	}
}

// `iosched check` reads the seeded probe results as the daemon does: a
// FIFO (at once), truncated JSON, a NaN or a result naming a scheduler no
// kernel has are errors naming the file (and the result), exit 1. Before,
// it said "policy OK" whatever the files held.
func TestCheckValidatesSeeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds")
	if err := os.Mkdir(seeds, 0o755); err != nil {
		t.Fatal(err)
	}
	rec := `{"key": {"class": "virtio"}, "device": "vdf", "at": "2026-01-01T00:00:00Z", "engine": "psync", "depth": 32, "block_size": 4096,
		"candidates": ["none", "frobnicate"], "figures": [{"scheduler": "frobnicate", "iops": 1000}, {"scheduler": "none", "iops": 900}]}`
	for name, body := range map[string]string{
		"frob.json":  `{"version": 1, "results": [` + rec + `]}`,
		"trunc.json": `{"version": 1, "results": [` + rec[:40],
		"nan.json":   `{"version": 1, "results": [{"device": "vdn", "iops": NaN}]}`,
	} {
		if err := os.WriteFile(filepath.Join(seeds, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(seeds, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf("[daemon]\nprobe_results = [%q]\n", filepath.Join(seeds, "*.json"))), 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main([]string{"--policy", pol, "--sysfs", t.TempDir(), "check"}, &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("iosched check waits on the FIFO seed file")
	}
	if r.code != 1 || strings.Contains(r.out, "policy OK") {
		t.Errorf("exit %d, want 1\n%s%s", r.code, r.out, r.stderr)
	}
	for _, want := range []string{
		"probe_results: " + filepath.Join(seeds, "fifo.json") + ": not a regular file (a FIFO)",
		"probe_results: " + filepath.Join(seeds, "frob.json") + `: result 1 (device vdf): not used: candidate "frobnicate" is not a scheduler`,
		"probe_results: " + filepath.Join(seeds, "nan.json") + ": result 1 (at byte ",
		"probe_results: " + filepath.Join(seeds, "trunc.json") + ": result 1 (at byte ",
		"the policy is invalid: 4 error(s)",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}
