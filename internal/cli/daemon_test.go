package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An invalid policy stops the daemon before it starts: exit 1 and the very
// lines iosched check prints.
func TestDaemonInvalidPolicyExitsLikeCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(p, []byte(`[[rule]]
name = "loops"
[rule.match]
name = ["loop2[0-3][0-9][0-9][0-9]"]
[rule.set]
readahead_kb = 128

[daemon]
reconcile_interval = "soon"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := Main(args, &stdout, &stderr)
		return code, stderr.String()
	}
	code, daemonErr := run("daemon", "--policy", p, "--sysfs", dir, "--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"))
	if code != 1 {
		t.Fatalf("daemon with an invalid policy: exit %d, want 1\n%s", code, daemonErr)
	}
	checkCode, checkErr := run("check", "--policy", p, "--sysfs", dir)
	if checkCode != 1 || daemonErr != checkErr {
		t.Errorf("daemon says\n%s\ncheck (exit %d) says\n%s", daemonErr, checkCode, checkErr)
	}
	for _, want := range []string{p + ":6:1: rule 1 \"loops\": set.readahead_kb:", p + ":9:1: daemon.reconcile_interval:"} {
		if !strings.Contains(daemonErr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, daemonErr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "state.json")); !os.IsNotExist(err) {
		t.Errorf("a daemon that did not start left a state file: %v", err)
	}
}

func TestDaemonRejectsAnUnknownUeventSource(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"daemon", "--uevent-source", "systemd"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `"systemd"`) {
		t.Errorf("exit %d, stderr %q; want 2 naming the bad source", code, stderr.String())
	}
}
