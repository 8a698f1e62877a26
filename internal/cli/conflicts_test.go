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

// plan names only the writers that act on the disk, deciding their tests
// from the disk's own sysfs values, and says "may" only where a test
// cannot be decided. Before, plan vda (rotational 1, removable 0) with a
// policy that tests neither warned of both distro rules, each "if
// ATTR{queue/rotational}==... (not known here)", and of tuned's [disk] "if
// the disk is not removable (not known here)".
func TestConflictsKnowTheDisk(t *testing.T) {
	inRepoRoot(t)
	root := t.TempDir()
	write := func(p, text string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/udev/rules.d/60-ioschedulers.rules", `ACTION=="add|change", KERNEL=="sd[a-z]|vd[a-z]", ATTR{queue/rotational}=="0", ATTR{queue/scheduler}="mq-deadline"
ACTION=="add|change", KERNEL=="sd[a-z]|vd[a-z]", ATTR{queue/rotational}=="1", ATTR{queue/scheduler}="bfq"
ACTION=="add|change", KERNEL=="vd[a-z]", ATTR{queue/scheduler}=="*\[none\]*", ATTR{queue/nr_requests}="64"
`)
	write("etc/tuned/active_profile", "x\n")
	write("usr/lib/tuned/x/tuned.conf", "[disk]\nreadahead=>4096\n")
	policy := filepath.Join(root, "policy.toml")
	write("policy.toml", `[[rule]]
name = "virtio"
match = { class = "virtio" }
set = { scheduler = "none", read_ahead_kb = 512, nr_requests = 32 }
`)
	if got := queueFile(t, "testdata/sysfs/cloud", "vda", "rotational"); got != "1" {
		t.Fatalf("the fixture's vda rotational = %s, want 1", got)
	}
	out, errb, code := runMain(t, "--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--root", root, "--policy", policy, "plan", "vda")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	want := []string{
		`  warning: udev rule /etc/udev/rules.d/60-ioschedulers.rules:2 sets scheduler to "bfq" on add and change events; udevd runs it after iosched and undoes the policy's scheduler = none (rule "virtio")`,
		// The policy sets the scheduler: whether udevd sees none is
		// a race, so "may".
		`  warning: udev rule /etc/udev/rules.d/60-ioschedulers.rules:3 may write nr_requests to "64" on add and change events if ATTR{queue/scheduler}=="*\\[none\\]*" (not known here); udevd runs it after iosched and may undo the policy's nr_requests = 32 (rule "virtio")`,
		`  warning: tuned profile "x" (/usr/lib/tuned/x/tuned.conf:2) sets read_ahead_kb to 4096 when it is lower; tuned undoes the policy's read_ahead_kb = 512 (rule "virtio")`,
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "  warning:") {
			got = append(got, l)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
