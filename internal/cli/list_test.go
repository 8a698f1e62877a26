package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers this file uses: 7140-7159.

// fixture flags: the fake trees, and a node directory without nodes so the
// NOWAIT column is the same "?" with the same reason on every machine.
func fixture(tree string) []string {
	return []string{"--sysfs", "testdata/sysfs/" + tree, "--dev", "testdata/dev-empty"}
}

func TestGoldenList(t *testing.T) {
	inRepoRoot(t)
	tests := []struct {
		file string
		args []string
	}{
		{"list.txt", append([]string{"list"}, fixture("cloud")...)},
		{"list.json", append([]string{"list", "--json"}, fixture("cloud")...)},
		{"list-broken.txt", append([]string{"list"}, fixture("broken")...)},
		{"list-broken.json", append([]string{"list", "--json"}, fixture("broken")...)},
		{"list-classonly.txt", append([]string{"list"}, fixture("classonly")...)},
		// Named disks come in the order asked for, each once.
		{"list-named.txt", append([]string{"list"}, append(fixture("cloud"), "nvme1n1", "nvme1c1n1", "dm-1", "sdd", "dm-1")...)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			stdout, stderr, code := runMain(t, tt.args...)
			if code != 0 || len(stderr) != 0 {
				t.Fatalf("iosched %s: exit %d, stderr %q", strings.Join(tt.args, " "), code, stderr)
			}
			golden(t, tt.file, stdout)
			again, _, _ := runMain(t, tt.args...)
			if !bytes.Equal(stdout, again) {
				t.Fatal("two runs printed different output")
			}
		})
	}
}

func TestListUnknownDevice(t *testing.T) {
	inRepoRoot(t)
	tests := []struct {
		tree, dev, stderr string
	}{
		{"cloud", "vdq", "iosched: no such block device: vdq\n"},
		{"cloud", "vda1", "iosched: vda1 is a partition of vda, not a whole disk: name vda\n"},
		{"cloud", "../block/vda", "iosched: invalid device name: \"../block/vda\" contains '/' or NUL\n"},
		// Listed in the tree, but its links dangle.
		{"broken", "vdz", "iosched: no such block device: vdz (block/vdz is a dangling link to ../devices/pci0000:00/0000:00:02.0/virtio7/block/vdz: the disk is gone, or the tree lacks its directory)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.dev, func(t *testing.T) {
			// A good disk first: one bad name fails the whole command.
			stdout, stderr, code := runMain(t, append([]string{"list"}, append(fixture(tt.tree), "ram0", tt.dev)...)...)
			if code != 1 || string(stderr) != tt.stderr || len(stdout) != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1, no output, %q", code, stdout, stderr, tt.stderr)
			}
		})
	}
}

// listJSON is the documented shape of list --json, decoded loosely so that
// the test sees nulls and missing keys.
type listJSON struct {
	Devices []map[string]json.RawMessage `json:"devices"`
}

func TestListJSONShape(t *testing.T) {
	inRepoRoot(t)
	stdout, _, code := runMain(t, append([]string{"list", "--json"}, fixture("cloud")...)...)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var out listJSON
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatal(err)
	}
	keys := []string{"name", "major_minor", "class", "driver", "transport", "rotational", "removable",
		"hw_queues", "scheduler", "schedulers", "nowait", "size_bytes", "model", "vendor", "serial",
		"tunables", "errors"}
	byName := map[string]map[string]json.RawMessage{}
	for _, d := range out.Devices {
		var name string
		json.Unmarshal(d["name"], &name)
		byName[name] = d
		for _, k := range keys {
			if _, ok := d[k]; !ok {
				t.Errorf("%s: key %q missing", name, k)
			}
		}
		if string(d["errors"]) != "[]" {
			t.Errorf("%s: errors %s, want []", name, d["errors"])
		}
		// No node in testdata/dev-empty: unknown, and why.
		if string(d["nowait"]) != "null" || !strings.Contains(string(d["nowait_reason"]), "testdata/dev-empty/"+name) {
			t.Errorf("%s: nowait %s reason %s", name, d["nowait"], d["nowait_reason"])
		}
	}
	for _, bio := range []string{"zram0", "ram0", "md0", "pmem0", "nvme1n1"} {
		if d := byName[bio]; string(d["scheduler"]) != "null" || string(d["schedulers"]) != "[]" || string(d["hw_queues"]) != "0" || len(d["bio_based"]) == 0 {
			t.Errorf("%s (bio-based): scheduler %s schedulers %s hw_queues %s bio_based %s", bio, d["scheduler"], d["schedulers"], d["hw_queues"], d["bio_based"])
		}
	}
	// A copied dm-0 without queue/scheduler or mq/: nothing says it is
	// bio-based (a multipath table is request-based), so both are unknown.
	var missing map[string]string
	if d := byName["dm-0"]; string(d["scheduler"]) != "null" || string(d["hw_queues"]) != "null" || len(d["bio_based"]) != 0 ||
		json.Unmarshal(d["missing"], &missing) != nil || !maps.Equal(missing, map[string]string{"hw_queues": "mq/", "scheduler": "queue/scheduler"}) {
		t.Errorf("dm-0: scheduler %s hw_queues %s bio_based %s missing %s", d["scheduler"], d["hw_queues"], d["bio_based"], d["missing"])
	}
	if d := byName["vda"]; string(d["scheduler"]) != `"mq-deadline"` || string(d["class"]) != `"virtio"` || string(d["rotational"]) != "true" {
		t.Errorf("vda: %s %s rotational %s", d["class"], d["scheduler"], d["rotational"])
	}
	if d := byName["dm-1"]; string(d["multipath"]) != "true" || string(d["dm_name"]) != `"mpatha"` {
		t.Errorf("dm-1: multipath %s dm_name %s", d["multipath"], d["dm_name"])
	}
	if bytes.Contains(stdout, []byte(`"/`)) {
		t.Error("JSON output holds an absolute path")
	}
}

// TestListTable checks the text table is aligned: every row's cells start
// in the header's columns.
func TestListTable(t *testing.T) {
	inRepoRoot(t)
	stdout, _, _ := runMain(t, append([]string{"list"}, fixture("cloud")...)...)
	lines := strings.Split(strings.TrimRight(string(stdout), "\n"), "\n")
	header := lines[0]
	cols := strings.Fields(header)
	if !slices.Equal(cols, []string{"NAME", "CLASS", "DRIVER", "ROT", "HWQ", "SCHEDULER", "NOWAIT", "SIZE", "MODEL"}) {
		t.Fatalf("header %q", header)
	}
	var starts []int
	for _, c := range cols {
		starts = append(starts, strings.Index(header, c))
	}
	rows := 0
	for _, l := range lines[1:] {
		if strings.Contains(l, ": ") { // the notes after the table
			break
		}
		rows++
		for i, s := range starts {
			if len(l) <= s || l[s] == ' ' || (s > 0 && l[s-1] != ' ') {
				t.Errorf("row %q: column %s not at offset %d", l, cols[i], s)
			}
		}
	}
	if rows != 23 {
		t.Errorf("%d rows, want the 23 disks of the cloud tree", rows)
	}
}

func TestIntegrationList(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7140)
	l.Bind(t, 4<<20)
	z := looptest.AddZram(t, 64<<20)

	stdout, stderr, code := runMain(t, "list", "--json", l.Name, z.Name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out struct {
		Devices []struct {
			Name         string   `json:"name"`
			Class        string   `json:"class"`
			Driver       string   `json:"driver"`
			Scheduler    *string  `json:"scheduler"`
			Schedulers   []string `json:"schedulers"`
			HWQueues     int      `json:"hw_queues"`
			NoWait       *bool    `json:"nowait"`
			NoWaitReason string   `json:"nowait_reason"`
			SizeBytes    *uint64  `json:"size_bytes"`
			Errors       []string `json:"errors"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(out.Devices) != 2 || out.Devices[0].Name != l.Name || out.Devices[1].Name != z.Name {
		t.Fatalf("devices %+v, want %s then %s", out.Devices, l.Name, z.Name)
	}
	loop, zram := out.Devices[0], out.Devices[1]
	if loop.Class != "loop" || loop.Scheduler == nil || *loop.Scheduler != "none" || loop.HWQueues < 1 {
		t.Errorf("%s: class %s scheduler %v hw_queues %d", l.Name, loop.Class, loop.Scheduler, loop.HWQueues)
	}
	if loop.NoWait == nil || !*loop.NoWait {
		t.Errorf("%s: nowait %v (%s), want true", l.Name, loop.NoWait, loop.NoWaitReason)
	}
	if loop.SizeBytes == nil || *loop.SizeBytes != 4<<20 || len(loop.Errors) != 0 {
		t.Errorf("%s: size %v errors %q", l.Name, loop.SizeBytes, loop.Errors)
	}
	if zram.Class != "zram" || zram.Scheduler != nil || len(zram.Schedulers) != 0 || zram.HWQueues != 0 {
		t.Errorf("%s: class %s scheduler %v hw_queues %d, want zram, null, 0", z.Name, zram.Class, zram.Scheduler, zram.HWQueues)
	}
	if zram.NoWait == nil || *zram.NoWait {
		t.Errorf("%s: nowait %v (%s), want false", z.Name, zram.NoWait, zram.NoWaitReason)
	}

	// The whole list (what `iosched list` prints on this machine) has both,
	// whatever other tests create and remove meanwhile.
	stdout, stderr, code = runMain(t, "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("\n%s ", l.Name),
		fmt.Sprintf("\n%s ", z.Name),
	} {
		if !strings.Contains(string(stdout), want) {
			t.Errorf("list output lacks a row for %q:\n%s", strings.TrimSpace(want), stdout)
		}
	}
	row := rowOf(string(stdout), l.Name)
	if f := strings.Fields(row); len(f) < 8 || f[1] != "loop" || f[5] != "none" || f[6] != "yes" || f[7] != "4M" {
		t.Errorf("row %q, want loop ... none yes 4M", row)
	}
	row = rowOf(string(stdout), z.Name)
	if f := strings.Fields(row); len(f) < 8 || f[1] != "zram" || f[4] != "0" || f[5] != "-" || f[6] != "no" {
		t.Errorf("row %q, want zram ... 0 - no", row)
	}

	// Gone: a disk named on the command line that was removed.
	gone := looptest.Add(t, 7141)
	if err := looptest.RemoveRaw(gone.N); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runMain(t, "list", gone.Name)
	if code != 1 || !strings.Contains(string(stderr), "no such block device: "+gone.Name) {
		t.Errorf("list %s after removal: exit %d, stderr %q", gone.Name, code, stderr)
	}
}

func rowOf(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

// TestIntegrationListThisMachine: the real sysfs of this machine reads with
// no error on its virtio disk, when it has one (the project's VMs do).
func TestIntegrationListThisMachine(t *testing.T) {
	looptest.Require(t)
	if _, err := os.Stat("/sys/block/vda"); err != nil {
		t.Skip("no vda here")
	}
	stdout, stderr, code := runMain(t, "list", "--json", "vda")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out listJSON
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatal(err)
	}
	d := out.Devices[0]
	sched, _ := os.ReadFile("/sys/block/vda/queue/scheduler")
	if string(d["class"]) != `"virtio"` || string(d["driver"]) != `"virtio_blk"` || string(d["errors"]) != "[]" {
		t.Errorf("vda: class %s driver %s errors %s", d["class"], d["driver"], d["errors"])
	}
	if s := string(d["scheduler"]); !strings.Contains(string(sched), "["+strings.Trim(s, `"`)+"]") {
		t.Errorf("vda scheduler %s, kernel says %q", s, sched)
	}
}

// TestRenderListNotes: a "?" in NOWAIT is explained once per distinct reason,
// by name when few disks share it.
func TestRenderListNotes(t *testing.T) {
	t.Parallel()
	yes := true
	size := uint64(3 << 30)
	devs := []*sysfs.Device{
		{Name: "vda", Class: sysfs.ClassVirtio, Driver: "virtio_blk", NoWaitReason: "open /dev/vda: operation not permitted", SizeBytes: &size,
			Missing: map[string]string{"scheduler": "queue/scheduler", "hw_queues": "mq/"}},
		{Name: "loop8", Class: sysfs.ClassLoop, Driver: "loop", NoWaitReason: "open /dev/loop8: no such device or address", HWQueues: intp(1), Errors: []string{"queue: no such file or directory"}},
		{Name: "loop9", Class: sysfs.ClassLoop, Driver: "loop", NoWaitReason: "open /dev/loop9: no such device or address", HWQueues: intp(0), BioBasedBy: "test"},
		{Name: "zram0", Class: sysfs.ClassZRAM, Driver: "zram", NoWait: &yes, HWQueues: intp(0), BioBasedBy: "zram disks are bio-based"},
		{Name: "sdx", Class: sysfs.ClassSCSI, Transport: "ahci", NoWait: &yes, HWQueues: intp(1)},
	}
	var buf bytes.Buffer
	if err := renderList(&buf, devs); err != nil {
		t.Fatal(err)
	}
	want := `NAME   CLASS   DRIVER      ROT  HWQ  SCHEDULER  NOWAIT  SIZE  MODEL
vda    virtio  virtio_blk  ?    ?    ?          ?       3G    -
loop8  loop    loop        ?    1    ?          ?       ?     -
loop9  loop    loop        ?    0    -          ?       ?     -
zram0  zram    zram        ?    0    -          yes     ?     -
sdx    scsi    -           ?    1    ?          yes     ?     -
vda: unknown: hw_queues (mq/), scheduler (queue/scheduler) missing from the tree
loop8: warning: queue: no such file or directory
vda: nowait unknown: open /dev/vda: operation not permitted
nowait unknown for loop8, loop9: open /dev/<disk>: no such device or address
`
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// One entry that cannot be read (a link loop) is reported and the other
// disks are still listed; named disks that cannot be read are all named.
func TestListSurvivesABadEntry(t *testing.T) {
	inRepoRoot(t)
	tree := copyTree(t, "testdata/sysfs/cloud")
	if err := os.Symlink("zz", filepath.Join(tree, "block", "zz")); err != nil {
		t.Fatal(err)
	}
	out, errb, code := runMain(t, "--sysfs", tree, "--dev", "testdata/dev-empty", "list")
	if code != 0 || !bytes.Contains(out, []byte("vda ")) || !bytes.Contains(out, []byte("warning: skipped: zz:")) {
		t.Errorf("list with a link loop: exit %d\n%s%s", code, out, errb)
	}
	_, errb, code = runMain(t, "--sysfs", tree, "--dev", "testdata/dev-empty", "list", "vdq", "vda", "vdr")
	if code != 1 || !bytes.Contains(errb, []byte("vdq")) || !bytes.Contains(errb, []byte("vdr")) {
		t.Errorf("list of two missing disks: exit %d, stderr %q; want both named", code, errb)
	}
}

func intp(n int) *int { return &n }
