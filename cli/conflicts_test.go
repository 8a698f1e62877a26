package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conflictArgs runs a command on the cloud fixture tree with the cli test
// policy and a root holding a udev rule and a tuned profile that undo it.
func conflictArgs(args ...string) []string {
	return append(cloudArgs("testdata/sysfs/cloud", "--root", "testdata/roots/conflicts"), args...)
}

// plan, explain and check name each udev rule and tuned setting that undoes
// a setting the policy makes on a disk, with its file and line and value.
func TestGoldenConflicts(t *testing.T) {
	inRepoRoot(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"plan-conflicts.txt", conflictArgs("plan", "vda", "nvme0n1", "sdb", "sr0")},
		{"explain-conflicts-nvme0n1.txt", conflictArgs("explain", "nvme0n1")},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, errb, code := runMain(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb)
			}
			golden(t, tc.golden, out)
		})
	}
	out, errb, code := runMain(t, conflictArgs("check")...)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, errb)
	}
	golden(t, "check-conflicts.txt", append(out, errb...))
}

func TestConflictsJSON(t *testing.T) {
	inRepoRoot(t)
	out, _, code := runMain(t, conflictArgs("plan", "--json", "nvme0n1")...)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got struct {
		Devices []struct {
			Warnings []string `json:"warnings"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := `udev rule /etc/udev/rules.d/60-nvme-kyber.rules:4 sets scheduler to "kyber" on add and change events; udevd runs it after iosched and undoes the policy's scheduler = none (rule "virtio and nvme: none")`
	if len(got.Devices) != 1 || len(got.Devices[0].Warnings) == 0 || got.Devices[0].Warnings[0] != want {
		t.Errorf("plan --json nvme0n1 warnings = %q, want first %q", got.Devices, want)
	}
}

// A --sysfs tree other than /sys is not this machine's: without --root the
// machine's own udev rules are not read for it, so the fixtures' output
// does not depend on the machine the tests run on.
func TestConflictsNeedRootWithForeignTree(t *testing.T) {
	inRepoRoot(t)
	with, _, _ := runMain(t, conflictArgs("plan", "nvme0n1")...)
	without, _, _ := runMain(t, cloudArgs("testdata/sysfs/cloud", "plan", "nvme0n1")...)
	if !bytes.Contains(with, []byte("60-nvme-kyber.rules:4")) {
		t.Fatalf("no conflict reported with --root:\n%s", with)
	}
	if strings.Contains(string(without), "udev rule") || strings.Contains(string(without), "tuned profile") {
		t.Errorf("conflicts reported without --root:\n%s", without)
	}
	// A rule masked in /etc is not reported.
	root := copyTree(t, "testdata/roots/conflicts")
	mask(t, filepath.Join(root, "etc/udev/rules.d/60-nvme-kyber.rules"))
	out, _, _ := runMain(t, cloudArgs("testdata/sysfs/cloud", "--root", root, "plan", "nvme0n1")...)
	if bytes.Contains(out, []byte("kyber")) {
		t.Errorf("a masked rule is reported:\n%s", out)
	}
	if !bytes.Contains(out, []byte("tuned profile")) {
		t.Errorf("the tuned profile is no longer reported:\n%s", out)
	}
}

// mask replaces a rules file by a link to /dev/null, as an admin masks it.
func mask(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", p); err != nil {
		t.Fatal(err)
	}
}
