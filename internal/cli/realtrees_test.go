package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// The trees of real layouts (testdata/sysfs/<tree>/README.md says where
// each comes from), through the commands a user runs on them.

func realTree(tree string, args ...string) []string {
	return append([]string{"--sysfs", "testdata/sysfs/" + tree, "--dev", "testdata/dev-empty", "--policy", "internal/policy/default.toml"}, args...)
}

func TestGoldenRealTrees(t *testing.T) {
	inRepoRoot(t)
	tests := []struct {
		file string
		args []string
	}{
		{"real/list-linux26.txt", realTree("linux26", "list")},
		{"real/list-rhel5.txt", realTree("rhel5", "list")},
		{"real/list-ghw.txt", realTree("ghw", "list")},
		{"real/list-ghw.json", realTree("ghw", "list", "--json")},
		{"real/list-virtioscsi.txt", realTree("virtioscsi", "list")},
		{"real/list-linux416.txt", realTree("linux416", "list")},
		{"real/list-capture.txt", realTree("capture/sys", "list")},
		{"real/explain-linux26-cciss.txt", realTree("linux26", "explain", "cciss!c0d0")},
		{"real/explain-ghw-vda.txt", realTree("ghw", "explain", "vda")},
		{"real/explain-virtioscsi-sda.txt", realTree("virtioscsi", "explain", "sda")},
		{"real/explain-linux416-dm-0.txt", realTree("linux416", "explain", "dm-0")},
		{"real/plan-virtioscsi.txt", realTree("virtioscsi", "plan")},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			stdout, stderr, code := runMain(t, tt.args...)
			if code != 0 || len(stderr) != 0 {
				t.Fatalf("iosched %s: exit %d, stderr %q", strings.Join(tt.args, " "), code, stderr)
			}
			golden(t, tt.file, stdout)
		})
	}
}

// A partition is never a disk: list, plan, apply and explain refuse it by
// name, naming its disk, and write nothing.
func TestPartitionNamedIsAnError(t *testing.T) {
	inRepoRoot(t)
	for _, tt := range []struct{ tree, part, disk string }{
		{"linux26", "sda1", "sda"}, // no partition file; DEVTYPE=partition
		{"linux26", "cciss!c0d0p1", "cciss!c0d0"},
		{"rhel5", "hda1", "hda"}, // block/hda/hda1, no class/block
		{"ghw", "vda1", "vda"},
		{"cloud", "nvme0n1p1", "nvme0n1"},
	} {
		tree := copyTree(t, "testdata/sysfs/"+tt.tree)
		before := snapshot(t, tree)
		for _, cmd := range [][]string{{"list"}, {"plan"}, {"apply"}, {"apply", "--dry-run"}, {"explain"}} {
			args := append([]string{"--sysfs", tree, "--dev", "testdata/dev-empty", "--policy", "internal/policy/default.toml"}, cmd...)
			stdout, stderr, code := runMain(t, append(args, tt.part)...)
			want := "iosched: " + tt.part + " is a partition of " + tt.disk + ", not a whole disk: name " + tt.disk + "\n"
			if code != 1 || string(stderr) != want || len(stdout) != 0 {
				t.Errorf("%s %s %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tt.tree, strings.Join(cmd, " "), tt.part, code, stdout, stderr, want)
			}
		}
		if after := snapshot(t, tree); len(after) != len(before) {
			t.Errorf("%s: files changed in number: %d -> %d", tt.tree, len(before), len(after))
		} else {
			for f, v := range before {
				if after[f] != v {
					t.Errorf("%s: %s changed", tt.tree, f)
				}
			}
		}
	}
}

// With --sysfs at a copied tree and no --dev, no node of this machine is
// opened: NOWAIT is unknown, and the reason says to pass --dev.
func TestNoWaitForeignTreeWithoutDev(t *testing.T) {
	inRepoRoot(t)
	stdout, stderr, code := runMain(t, "--sysfs", "testdata/sysfs/cloud", "list", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out listJSON
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatal(err)
	}
	for _, d := range out.Devices {
		if string(d["nowait"]) != "null" || !strings.Contains(string(d["nowait_reason"]), "pass --dev DIR to test them") {
			t.Errorf("%s: nowait %s reason %s", d["name"], d["nowait"], d["nowait_reason"])
		}
	}
	if len(out.Devices) != 23 {
		t.Errorf("%d disks, want the cloud tree's 23", len(out.Devices))
	}
	stdout, _, _ = runMain(t, "--sysfs", "testdata/sysfs/cloud", "list")
	if want := "nowait unknown for every disk: the sysfs tree testdata/sysfs/cloud is not this machine's /sys, so /dev does not hold its disks' nodes: pass --dev DIR to test them\n"; !strings.HasSuffix(string(stdout), want) {
		t.Errorf("list ends:\n%s\nwant %q", stdout, want)
	}
	// explain says it on the disk's own line.
	stdout, _, _ = runMain(t, "--sysfs", "testdata/sysfs/cloud", "--policy", "internal/policy/default.toml", "explain", "loop0")
	if !strings.Contains(string(stdout), "nowait:      ? (the sysfs tree testdata/sysfs/cloud is not this machine's /sys") {
		t.Errorf("explain loop0:\n%s", stdout)
	}
}

func TestSysfsOneLevelAboveHint(t *testing.T) {
	inRepoRoot(t)
	for _, cmd := range []string{"list", "plan", "explain"} {
		args := []string{"--sysfs", "testdata/sysfs/capture", "--policy", "internal/policy/default.toml", cmd}
		if cmd == "explain" {
			args = append(args, "loop0")
		}
		_, stderr, code := runMain(t, args...)
		want := "iosched: sysfs root testdata/sysfs/capture has no block/ or class/block/, but testdata/sysfs/capture/sys has: pass --sysfs testdata/sysfs/capture/sys\n"
		if code != 1 || string(stderr) != want {
			t.Errorf("%s: exit %d, stderr %q; want %q", cmd, code, stderr, want)
		}
	}
}

// A dangling class/block link named on the command line is said to be one.
func TestDanglingClassBlockLink(t *testing.T) {
	inRepoRoot(t)
	_, stderr, code := runMain(t, realTree("capture/sys", "list", "loop0", "vdb")...)
	want := "iosched: no such block device: vdb (class/block/vdb is a dangling link to ../../devices/pci0000:00/0000:00:06.0/virtio4/block/vdb: the disk is gone, or the tree lacks its directory)\n"
	if code != 1 || string(stderr) != want {
		t.Errorf("exit %d, stderr %q; want %q", code, stderr, want)
	}
}

func TestHumanSizeLikeLsblk(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    uint64
		want string
	}{
		{0, "0B"},
		{512, "512B"},
		{1023, "1023B"},
		{1024, "1K"},
		{1073741312, "1G"}, // 512 short of 1 GiB: lsblk's 1G, never 1024M
		{1 << 30, "1G"},
		{1<<30 - 1<<20, "1023M"},
		{3 << 29, "1.5G"},
		{20 << 30, "20G"},
		{7814037168 * 512, "3.6T"},
		{1<<40 - 1, "1T"},
	} {
		if got := humanSize(&tt.n); got != tt.want {
			t.Errorf("humanSize(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
	if got := humanSize(nil); got != "?" {
		t.Errorf("humanSize(nil) = %s", got)
	}
}
