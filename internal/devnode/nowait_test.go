package devnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers this file uses: 7120-7139.

func TestNoWaitCannotTell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vdx"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, dev, reason string
	}{
		{"missing node", dir, "vda", "open " + dir + "/vda: no such file or directory"},
		{"missing dir", filepath.Join(dir, "absent"), "vda", "no such file or directory"},
		// A regular file: where O_DIRECT opens (ext4, tmpfs since 6.6)
		// the type check says "not a block device", elsewhere open fails.
		{"regular file", dir, "vdx", dir + "/vdx"},
		// A FIFO, a character device: refused by type, before any read,
		// not by O_DIRECT's "invalid argument".
		{"FIFO", dir, "fifo", dir + "/fifo is not a block device"},
		{"character device", "/dev", "null", "/dev/null is not a block device"},
		{"invalid name", dir, "../vdx", "invalid device name"},
		{"empty name", dir, "", "invalid device name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := NoWait(tt.dir, tt.dev, "254:0")
			if got != nil {
				t.Fatalf("NoWait = %v, want nil", *got)
			}
			if !strings.Contains(reason, tt.reason) {
				t.Fatalf("reason %q, want it to contain %q", reason, tt.reason)
			}
			if tt.dev == "vdx" && !strings.Contains(reason, "is not a block device") && !strings.Contains(reason, "invalid argument") {
				t.Fatalf("reason %q: want the file refused", reason)
			}
		})
	}
}

func TestFillRelativeDir(t *testing.T) {
	t.Parallel()
	// The reason names the directory as given, so output built from a
	// relative --dev is the same on every machine.
	d := &sysfs.Device{Name: "vda", MajorMinor: "254:0"}
	Fill("../../testdata/dev-empty", d)
	if d.NoWait != nil || d.NoWaitReason != "open ../../testdata/dev-empty/vda: no such file or directory" {
		t.Fatalf("NoWait %v reason %q", d.NoWait, d.NoWaitReason)
	}
}

func TestParseDevNum(t *testing.T) {
	t.Parallel()
	if n, ok := parseDevNum("259:3"); !ok || unix.Major(n) != 259 || unix.Minor(n) != 3 {
		t.Fatalf("parseDevNum(259:3) = %d, %v", n, ok)
	}
	if n, ok := parseDevNum("7:7100"); !ok || unix.Minor(n) != 7100 {
		t.Fatalf("parseDevNum(7:7100) = %d, %v", n, ok)
	}
	for _, s := range []string{"", "8", "8:", "a:0", "8:0:0", "-1:0"} {
		if _, ok := parseDevNum(s); ok {
			t.Errorf("parseDevNum(%q) accepted", s)
		}
	}
}

func TestAlignedBuffer(t *testing.T) {
	t.Parallel()
	for i := 0; i < 32; i++ {
		b := alignedBuffer(probeSize)
		if len(b) != probeSize || uintptr(unsafe.Pointer(&b[0]))%probeSize != 0 {
			t.Fatalf("buffer of %d bytes at %p: not %d-aligned", len(b), &b[0], probeSize)
		}
	}
}

func mm(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + name + "/dev")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestIntegrationNoWaitLoop(t *testing.T) {
	looptest.Require(t)
	l := looptest.Add(t, 7120)
	l.Bind(t, 1<<20)
	got, reason := NoWait("/dev", l.Name, mm(t, l.Name))
	if got == nil || !*got {
		t.Fatalf("NoWait(%s) = %v, %q; want true", l.Name, got, reason)
	}

	// A loop device with nothing bound has size 0: the probe reads at the
	// end, which is offset 0, and still tells.
	empty := looptest.Add(t, 7121)
	if got, reason := NoWait("/dev", empty.Name, mm(t, empty.Name)); got == nil || !*got {
		t.Fatalf("NoWait(unbound %s) = %v, %q; want true", empty.Name, got, reason)
	}

	// A node whose number is not the disk's is never probed.
	got, reason = NoWait("/dev", l.Name, "7:1")
	if got != nil || !strings.Contains(reason, "is device 7:7120, not 7:1") {
		t.Fatalf("NoWait with a wrong number = %v, %q", got, reason)
	}

	// --dev DIR: nodes elsewhere than /dev, found by name, checked by number.
	dir := t.TempDir()
	st := unix.Stat_t{}
	if err := unix.Stat("/dev/"+l.Name, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, l.Name), unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	if got, reason := NoWait(dir, l.Name, mm(t, l.Name)); got == nil || !*got {
		t.Fatalf("NoWait via %s = %v, %q; want true", dir, got, reason)
	}
	// A node in a subdirectory, as /dev/cciss/c0d0 is for cciss!c0d0.
	if err := os.Mkdir(filepath.Join(dir, "cciss"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "cciss", "c0d0"), unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	d := &sysfs.Device{Name: "cciss!c0d0", DevName: "cciss/c0d0", MajorMinor: mm(t, l.Name)}
	Fill(dir, d)
	if d.NoWait == nil || !*d.NoWait {
		t.Fatalf("NoWait of cciss/c0d0 via %s = %v, %q; want true", dir, d.NoWait, d.NoWaitReason)
	}
}

func TestIntegrationNoWaitZram(t *testing.T) {
	looptest.Require(t)
	z := looptest.AddZram(t, 16<<20)
	got, reason := NoWait("/dev", z.Name, mm(t, z.Name))
	if got == nil || *got {
		t.Fatalf("NoWait(%s) = %v, %q; want false (zram is not nowait-capable)", z.Name, got, reason)
	}
}

// A tree other than this machine's /sys gets its nodes only from --dev:
// this machine's /dev/loop0 has the same numbers as any other's loop0.
func TestNodesFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sysfs, dev, dir string
	}{
		{"/sys", "", paths.Default.Dev},
		{"/sys/", "", paths.Default.Dev},
		{"", "", paths.Default.Dev},
		{"/sys", "/tmp/nodes", "/tmp/nodes"},
		{"../../testdata/sysfs/cloud", "../../testdata/dev-empty", "../../testdata/dev-empty"},
		{"../../testdata/sysfs/cloud", "", ""},
	}
	for _, tt := range tests {
		n := NodesFor(tt.sysfs, tt.dev)
		d := &sysfs.Device{Name: "vda", DevName: "vda", MajorMinor: "254:0"}
		n.Fill(d)
		if tt.dir == "" {
			want := "the sysfs tree ../../testdata/sysfs/cloud is not this machine's /sys, so /dev does not hold its disks' nodes"
			if d.NoWait != nil || d.NoWaitReason != want || !n.Refused() {
				t.Errorf("NodesFor(%q, %q): nowait %v reason %q, want unknown: %q", tt.sysfs, tt.dev, d.NoWait, d.NoWaitReason, want)
			}
			continue
		}
		if n.dir != tt.dir || n.Refused() {
			t.Errorf("NodesFor(%q, %q) = %+v, want dir %q", tt.sysfs, tt.dev, n, tt.dir)
		}
	}
}

// The node of a disk whose name holds a '!' is DevName, in a directory.
func TestFillDevName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := &sysfs.Device{Name: "cciss!c0d0", DevName: "cciss/c0d0", MajorMinor: "104:0"}
	Fill(dir, d)
	if want := "open " + dir + "/cciss/c0d0: no such file or directory"; d.NoWait != nil || d.NoWaitReason != want {
		t.Fatalf("reason %q, want %q", d.NoWaitReason, want)
	}
	for _, bad := range []string{"../etc/x", "/dev/sda", "a/../b", "a//b"} {
		if got, reason := NoWait(dir, bad, "8:0"); got != nil || !strings.Contains(reason, "invalid device name") {
			t.Errorf("NoWait(%q) = %v, %q; want refused", bad, got, reason)
		}
	}
}
