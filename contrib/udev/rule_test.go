// Package udev holds the udev rule that runs `iosched apply` for each disk,
// for hosts without the daemon; its test checks what udevd would run.
package udev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
)

// The loop number this test creates (see the range table in looptest).
const ruleTestLoop = 42010

// udevd, given only this rule, runs `iosched apply NAME` for a whole disk's
// add and change events, and nothing for its remove. udevadm test
// simulates the event (it runs no RUN program) in a mount namespace of
// our own whose rules directories hold only the rule, and whose /run is a
// tmpfs, so nothing of the host's udev is read or written.
func TestRuleRunsApplyForTheDisk(t *testing.T) {
	looptest.Require(t)
	udevadm, err := exec.LookPath("udevadm")
	if err != nil {
		t.Fatalf("udevadm (Debian package udev): %v", err)
	}
	rules := t.TempDir()
	b, err := os.ReadFile("60-iosched.rules")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "60-iosched.rules"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	l := looptest.Add(t, ruleTestLoop)
	simulate := func(action string) string {
		t.Helper()
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -t tmpfs tmpfs /run && mount --bind "$1" /usr/lib/udev/rules.d && mount --bind "$1" /etc/udev/rules.d && exec "$2" test --action="$3" "$4"`,
			"sh", rules, udevadm, action, "/sys/block/"+l.Name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("udevadm test --action=%s: %v\n%s", action, err, out)
		}
		return string(out)
	}
	want := "run: '/usr/bin/iosched apply " + l.Name + "'"
	for _, action := range []string{"add", "change"} {
		if out := simulate(action); !strings.Contains(out, want) {
			t.Errorf("%s: udevd would not run %q:\n%s", action, want, out)
		}
	}
	if out := simulate("remove"); strings.Contains(out, "run: '/usr/bin/iosched") {
		t.Errorf("remove: udevd would run iosched:\n%s", out)
	}
}
