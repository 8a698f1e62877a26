package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/disklock"
)

// queueFile reads one queue attribute of a disk in a copied tree.
func queueFile(t *testing.T, tree, disk, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tree, "block", disk, "queue", attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A named disk that is not there must not stop the others: they are
// applied, the missing one is reported gone, and the exit status is 1.
// This failed before apply read each disk on its own: the first missing
// name ended the command with an error and nothing was written to vda or
// nvme0n1.
func TestApplyNamedDiskGoneDoesTheRest(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	out, _, code := runMain(t, cloudArgs(tree, "apply", "vda", "vdq", "nvme0n1")...)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, out)
	}
	if !bytes.Contains(out, []byte("vdq: gone: no such block device: vdq\n")) {
		t.Errorf("the missing disk is not reported gone:\n%s", out)
	}
	if got := queueFile(t, tree, "vda", "nr_requests"); got != "128" {
		t.Errorf("vda nr_requests = %s, want 128 (the disk before the missing one was not applied)", got)
	}
	if got := queueFile(t, tree, "nvme0n1", "nr_requests"); got != "128" {
		t.Errorf("nvme0n1 nr_requests = %s, want 128 (the disk after the missing one was not applied)", got)
	}

	out, _, code = runMain(t, cloudArgs(tree, "apply", "--json", "vdq", "vda")...)
	var res struct {
		Devices []struct {
			Name  string `json:"name"`
			Gone  bool   `json:"gone"`
			Error string `json:"error"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(out, &res); err != nil || code != 1 {
		t.Fatalf("apply --json: exit %d, %v\n%s", code, err, out)
	}
	if len(res.Devices) != 2 || res.Devices[1].Name != "vdq" || !res.Devices[1].Gone || res.Devices[1].Error == "" {
		t.Errorf("apply --json: want vda, then vdq gone with its error; got %+v", res.Devices)
	}

	// plan too plans the others, and says which is missing.
	out, errb, code := runMain(t, cloudArgs(tree, "plan", "vdq", "sdb")...)
	if code != 1 || !bytes.Contains(out, []byte("sdb (scsi)")) || !bytes.Contains(errb, []byte("no such block device: vdq")) {
		t.Errorf("plan vdq sdb: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
}

// A disk half removed (the kernel unregisters its queue/ and mq/ before its
// directory goes: block/genhd.c del_gendisk) is gone, not bio-based. This
// failed before: vdb was planned as "skip scheduler: no scheduler on a
// bio-based disk", read_ahead_kb was tried, and apply exited 0.
func TestApplyHalfRemovedDiskIsGone(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	dir, err := filepath.EvalSymlinks(filepath.Join(tree, "block", "vdb"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"queue", "mq"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code := runMain(t, cloudArgs(tree, "apply", "vdb", "vda")...)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, out)
	}
	if bytes.Contains(out, []byte("bio-based")) || !bytes.Contains(out, []byte("vdb: gone: no such block device: vdb")) {
		t.Errorf("the half-removed disk is not reported gone:\n%s", out)
	}
	if got := queueFile(t, tree, "vda", "nr_requests"); got != "128" {
		t.Errorf("vda nr_requests = %s, want 128", got)
	}
	// Listing every disk skips it with the reason, and shows the rest.
	out, _, code = runMain(t, cloudArgs(tree, "plan")...)
	if code != 0 || !bytes.Contains(out, []byte("warning: skipped: no such block device: vdb (it has no queue/ directory")) {
		t.Errorf("plan of every disk: exit %d\n%s", code, out)
	}
}

// Strings a device reports (model, vendor, serial, a device-mapper name)
// are the device's to choose: an ESC, a NUL, a tab, a newline or bytes
// that are not UTF-8 must reach a terminal escaped, never raw, while JSON
// keeps the exact string. This failed before: list printed the model raw,
// the ESC reached the terminal and the newline split the table.
func TestTextOutputEscapesDeviceStrings(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	model := "ST4000\x1b[2J\x00\tNM\n\xff\xfe\\x"
	dev, err := filepath.EvalSymlinks(filepath.Join(tree, "block", "sdb", "device"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "model"), []byte(model+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const escaped = `ST4000\x1b[2J\x00\x09NM\x0a\xff\xfe\\x`
	for _, args := range [][]string{{"list"}, {"list", "sdb"}, {"explain", "sdb"}} {
		out, errb, code := runMain(t, cloudArgs(tree, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errb)
		}
		if bytes.ContainsAny(out, "\x1b\x00\t") || bytes.Contains(out, []byte{0xff}) {
			t.Errorf("%v: raw control bytes or invalid UTF-8 in the output:\n%q", args, out)
		}
		if !bytes.Contains(out, []byte(escaped)) {
			t.Errorf("%v: the model is not shown escaped as %s:\n%s", args, escaped, out)
		}
	}
	out, _, _ := runMain(t, cloudArgs(tree, "list", "--json", "sdb")...)
	var res struct {
		Devices []struct {
			Model string `json:"model"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	// JSON holds the string as read (trimmed of its surrounding space),
	// each invalid byte as U+FFFD.
	if want := "ST4000\x1b[2J\x00\tNM\n\ufffd\ufffd\\x"; res.Devices[0].Model != want {
		t.Errorf("list --json model = %q, want %q", res.Devices[0].Model, want)
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                       "",
		"Virtual Disk":           "Virtual Disk",
		"Amazon Elastic Block":   "Amazon Elastic Block",
		"a\x1bb":                 `a\x1bb`,
		"nul\x00":                `nul\x00`,
		"del\x7f":                `del\x7f`,
		"c1\u0085":               `c1\u0085`, // not \x85: that is the invalid byte 0x85
		"byte\x85":               `byte\x85`,
		"rtl\u202eevil":          `rtl\u202eevil`,
		"bad\xc3":                `bad\xc3`,
		`back\slash`:             `back\\slash`,
		"Ünïcødé ok":             "Ünïcødé ok",
		"tab\tnl\n":              `tab\x09nl\x0a`,
		"emoji \U0001F600 ok":    "emoji \U0001F600 ok",
		"tag \U000E0041 invisib": `tag \U000e0041 invisib`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// A disk a probe is measuring (its lock held) is not written by apply: a
// second scheduler switch at once on one queue can crash the kernel, and the
// probe would put its originals back over apply's writes. The other disks
// are done. The lock is the machine's, not the state directory's: an apply
// with another --state-dir than the probe's (here its default) is excluded
// too. Before, apply wrote it regardless; then, with the lock in
// --state-dir, whenever the two state directories differed.
func TestApplyLeavesADiskBeingProbed(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	lockFile := filepath.Join(t.TempDir(), "disks.lock")
	probing := disklock.New(lockFile) // the probe's process
	defer probing.Close()
	release, err := probing.Lock("vda")
	if err != nil {
		t.Fatal(err)
	}
	out, _, code := runMain(t, cloudArgs(tree, "--lock-file", lockFile, "apply", "vda", "nvme0n1")...)
	if code != 1 || !bytes.Contains(out, []byte("a probe is measuring this disk")) {
		t.Errorf("exit %d, want 1 and the probe named:\n%s", code, out)
	}
	if got := queueFile(t, tree, "vda", "nr_requests"); got == "128" {
		t.Errorf("vda was written while a probe held it")
	}
	if got := queueFile(t, tree, "nvme0n1", "nr_requests"); got != "128" {
		t.Errorf("nvme0n1 nr_requests = %s, want 128 (the other disk was not applied)", got)
	}
	release()
	if out, _, code := runMain(t, cloudArgs(tree, "--lock-file", lockFile, "apply", "--state-dir", t.TempDir(), "vda")...); code != 0 || queueFile(t, tree, "vda", "nr_requests") != "128" {
		t.Errorf("after the probe: exit %d, vda not applied:\n%s", code, out)
	}
}
