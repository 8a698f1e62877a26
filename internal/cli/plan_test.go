package cli

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/treetest"
)

// cloudArgs runs a command on the cloud fixture tree with the cli test policy.
func cloudArgs(sysfsRoot string, args ...string) []string {
	return append([]string{"--sysfs", sysfsRoot, "--dev", "testdata/dev-empty", "--policy", "testdata/policies/cloud.toml"}, args...)
}

func TestGoldenPlan(t *testing.T) {
	inRepoRoot(t)
	for _, tc := range []struct {
		golden string
		args   []string
		code   int
	}{
		{"plan.txt", cloudArgs("testdata/sysfs/cloud", "plan"), 0},
		{"plan.json", cloudArgs("testdata/sysfs/cloud", "plan", "--json"), 0},
		{"plan-named.txt", cloudArgs("testdata/sysfs/cloud", "plan", "vda", "ram0"), 0},
		{"plan-default.txt", []string{"--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--policy", "internal/policy/default.toml", "plan"}, 0},
		// Unreadable schedulers stop settings the policy wants: exit 1.
		{"plan-broken-tree.txt", cloudArgs("testdata/sysfs/broken", "plan"), 1},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, errb, code := runMain(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errb)
			}
			golden(t, tc.golden, out)
		})
	}
}

func TestPlanJSONShape(t *testing.T) {
	inRepoRoot(t)
	out, _, code := runMain(t, cloudArgs("testdata/sysfs/cloud", "plan", "--json", "vda")...)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got struct {
		Devices []struct {
			Name    string   `json:"name"`
			Class   string   `json:"class"`
			Rules   []string `json:"rules"`
			Changes []struct {
				Attribute, From, To, Rule, After string
			} `json:"changes"`
			Skipped  []struct{ Attribute, Reason, Rule string } `json:"skipped"`
			Errors   []string                                   `json:"errors"`
			Warnings []string                                   `json:"warnings"`
		} `json:"devices"`
		Warnings []string `json:"warnings"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	d := got.Devices[0]
	// nr_requests before the scheduler's parameters: writing it resets
	// mq-deadline's async_depth.
	if d.Name != "vda" || d.Class != "virtio" || len(d.Rules) != 3 ||
		d.Changes[0].Attribute != "nr_requests" || d.Changes[1].Attribute != "iosched/fifo_batch" || d.Changes[1].From != "16" {
		t.Errorf("unexpected plan for vda: %+v", d)
	}
}

func TestPlanDetailedExitcode(t *testing.T) {
	inRepoRoot(t)
	_, _, code := runMain(t, cloudArgs("testdata/sysfs/cloud", "plan", "--detailed-exitcode")...)
	if code != 2 {
		t.Errorf("changes pending: exit %d, want 2", code)
	}
	_, _, code = runMain(t, cloudArgs("testdata/sysfs/cloud", "plan", "--detailed-exitcode", "nosuch")...)
	if code != 1 {
		t.Errorf("unknown disk: exit %d, want 1", code)
	}
	_, _, code = runMain(t, "--sysfs", "testdata/sysfs/cloud", "--policy", "testdata/policies/broken.toml", "plan", "--detailed-exitcode")
	if code != 1 {
		t.Errorf("broken policy: exit %d, want 1", code)
	}
}

// copyTree copies a fixture tree so a test can change it.
func copyTree(t *testing.T, src string) string { return treetest.Copy(t, src) }

// snapshot maps every regular file of a tree to its contents.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var durationRe = regexp.MustCompile(` in [0-9.]+(ns|µs|ms|s)\n`)

func TestGoldenApply(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	before := snapshot(t, tree)

	out, errb, code := runMain(t, cloudArgs(tree, "apply")...)
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errb)
	}
	golden(t, "apply.txt", durationRe.ReplaceAll(out, []byte(" in DURATION\n")))

	// Exactly the files the plan named changed, to exactly the planned
	// values (a real sysfs would show "[bfq]" in the list; a copied tree
	// holds what was written).
	after := snapshot(t, tree)
	var changed []string
	for f, was := range before {
		if after[f] != was {
			changed = append(changed, f+": "+strings.TrimSpace(was)+" -> "+strings.TrimSpace(after[f]))
		}
	}
	if len(after) != len(before) {
		t.Errorf("apply created or removed files: %d before, %d after", len(before), len(after))
	}
	sort.Strings(changed)
	golden(t, "apply-changed.txt", []byte(strings.Join(changed, "\n")+"\n"))

	// Everything is in place now: plan has nothing to do, apply writes
	// nothing.
	out, _, code = runMain(t, cloudArgs(tree, "plan", "--detailed-exitcode")...)
	if code != 0 {
		t.Errorf("plan --detailed-exitcode after apply: exit %d, want 0\n%s", code, out)
	}
	out, _, code = runMain(t, cloudArgs(tree, "apply")...)
	if code != 0 || !bytes.Contains(out, []byte("apply: 0 written")) {
		t.Errorf("second apply: exit %d\n%s", code, out)
	}
	if again := snapshot(t, tree); len(again) != len(after) {
		t.Errorf("second apply changed the tree")
	}
}

func TestApplyDryRunWritesNothing(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	before := snapshot(t, tree)
	out, _, code := runMain(t, cloudArgs(tree, "apply", "--dry-run", "vda")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	golden(t, "apply-dry-run.txt", durationRe.ReplaceAll(out, []byte(" in DURATION\n")))
	after := snapshot(t, tree)
	for f, was := range before {
		if after[f] != was {
			t.Errorf("--dry-run changed %s", f)
		}
	}
}

func TestApplyFailureExitsOne(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	// On a copied tree, switching sr0 to bfq cannot make bfq's iosched/
	// directory appear, so the parameter write after the switch fails: the
	// failure is reported, the other disk is still done, exit 1.
	args := cloudArgs(tree, "apply", "sr0", "vda")
	args[5] = "testdata/policies/cdrom.toml"
	out, _, code := runMain(t, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	golden(t, "apply-failure.txt", durationRe.ReplaceAll(out, []byte(" in DURATION\n")))
}

func TestGoldenExplain(t *testing.T) {
	inRepoRoot(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"explain-vda.txt", cloudArgs("testdata/sysfs/cloud", "explain", "vda")},
		{"explain-sdb.txt", cloudArgs("testdata/sysfs/cloud", "explain", "sdb")},
		{"explain-nvme1n1.txt", cloudArgs("testdata/sysfs/cloud", "explain", "nvme1n1")},
		{"explain-vda.json", cloudArgs("testdata/sysfs/cloud", "explain", "--json", "vda")},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, errb, code := runMain(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb)
			}
			golden(t, tc.golden, out)
		})
	}
	_, errb, code := runMain(t, cloudArgs("testdata/sysfs/cloud", "explain", "vdq")...)
	if code != 1 || !bytes.Contains(errb, []byte("vdq")) {
		t.Errorf("explain of a missing disk: exit %d, stderr %q", code, errb)
	}
}

func TestGoldenCheck(t *testing.T) {
	inRepoRoot(t)
	out, errb, code := runMain(t, "--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--policy", "testdata/policies/broken.toml", "check")
	if code != 1 || len(out) != 0 {
		t.Errorf("broken policy: exit %d, stdout %q", code, out)
	}
	golden(t, "check-broken.txt", errb)

	out, _, code = runMain(t, "--policy", "testdata/policies/broken.toml", "check", "--json")
	if code != 1 {
		t.Errorf("broken policy --json: exit %d", code)
	}
	golden(t, "check-broken.json", out)

	out, errb, code = runMain(t, cloudArgs("testdata/sysfs/cloud", "check")...)
	if code != 0 {
		t.Fatalf("valid policy: exit %d\n%s", code, errb)
	}
	golden(t, "check-cloud.txt", append(out, errb...))
}

func TestDefaultPolicyIsTheEmbeddedOne(t *testing.T) {
	inRepoRoot(t)
	out, _, code := runMain(t, "default-policy")
	want, err := os.ReadFile("internal/policy/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !bytes.Equal(out, want) {
		t.Errorf("default-policy: exit %d, output differs from internal/policy/default.toml", code)
	}
	// What it prints is a valid policy an admin can start from.
	f := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errb, code := runMain(t, "--sysfs", "testdata/sysfs/cloud", "--policy", f, "check"); code != 0 {
		t.Errorf("check of the printed default: exit %d\n%s", code, errb)
	}
}
