package cli

import (
	"bytes"
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
