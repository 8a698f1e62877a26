package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// TestIntegrationApplyNamedLoopGone names three real loop devices
// (7213-7215) of which the middle one has been removed: the other two are
// switched, the removed one is reported gone, exit 1. Before apply read
// each disk on its own, the removed name ended the command and neither of
// the others was written.
func TestIntegrationApplyNamedLoopGone(t *testing.T) {
	looptest.Require(t)
	first, gone, last := looptest.Add(t, 7213), looptest.Add(t, 7214), looptest.Add(t, 7215)
	gone.Remove(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte(`
[[rule]]
name = "test loops: mq-deadline"
[rule.match]
name = "loop721[3-5]"
[rule.set]
scheduler = "mq-deadline"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, code := runMain(t, "--policy", pol, "apply", first.Name, gone.Name, last.Name)
	if code != 1 {
		t.Errorf("apply: exit %d, want 1\n%s%s", code, out, errb)
	}
	if !bytes.Contains(out, []byte("loop7214: gone: no such block device: loop7214\n")) {
		t.Errorf("loop7214 not reported gone:\n%s%s", out, errb)
	}
	fs, _ := sysfs.NewFS("/sys")
	for _, l := range []*looptest.Loop{first, last} {
		if got, err := fs.ReadQueueAttr(l.Name, "scheduler"); err != nil || got != "mq-deadline" {
			t.Errorf("%s: scheduler %q (%v), want mq-deadline", l.Name, got, err)
		}
	}
}
