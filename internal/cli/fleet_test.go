package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// iosched fleet runs iosched-fleet found in PATH with its arguments and
// exits with its code; without the program, it says where to get it.
// Not parallel: it sets PATH.
func TestFleetRunsItsProgram(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, FleetProgram), "github.com/iosched/iosched/cmd/iosched-fleet")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	if code := Main([]string{"fleet", "--range", "1h"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--prometheus URL is required") {
		t.Errorf("fleet without --prometheus: exit %d, %q; want 2 and the program's own message", code, errb.String())
	}
	out.Reset()
	if code := Main([]string{"fleet", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "--export-seeds") {
		t.Errorf("fleet --help: exit %d:\n%s", code, out.String())
	}
	t.Setenv("PATH", t.TempDir())
	errb.Reset()
	// (The test binary is built in a directory of its own: no
	// iosched-fleet is beside it.)
	if code := Main([]string{"fleet", "--prometheus", "http://127.0.0.1:1"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "go install github.com/iosched/iosched/cmd/iosched-fleet") {
		t.Errorf("without iosched-fleet: exit %d, %q", code, errb.String())
	}
}
