package conflicts

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
)

func ptr[T any](v T) *T { return &v }

// Disks as a snapshot shows them.
var (
	hdd = &sysfs.Device{Name: "sda", Class: sysfs.ClassSCSI, Path: "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
		Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}, Model: "ST4000NM0035-1V4"}
	hdd2 = &sysfs.Device{Name: "sdb", Class: sysfs.ClassSCSI, Path: "devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdb",
		Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
	ssd = &sysfs.Device{Name: "sdc", Class: sysfs.ClassSCSI, Path: "devices/pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0/block/sdc",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
	usbStick = &sysfs.Device{Name: "sdd", Class: sysfs.ClassSCSI, Path: "devices/pci0000:00/0000:00:14.0/usb2/2-4/2-4:1.0/host7/target7:0:0/7:0:0:0/block/sdd",
		Rotational: ptr(false), Removable: ptr(true), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
	vda = &sysfs.Device{Name: "vda", Class: sysfs.ClassVirtio, Path: "devices/pci0000:00/0000:00:04.0/virtio1/block/vda",
		Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
	ebs = &sysfs.Device{Name: "nvme1n1", Class: sysfs.ClassNVMe, Path: "devices/pci0000:00/0000:00:1f.0/nvme/nvme1/nvme1n1",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(2), Zoned: "none",
		Scheduler: ptr("none"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"}, Model: "Amazon Elastic Block Store"}
	instanceStore = &sysfs.Device{Name: "nvme2n1", Class: sysfs.ClassNVMe, Path: "devices/pci0000:00/0000:00:1e.0/nvme/nvme2/nvme2n1",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(2), Zoned: "none",
		Scheduler: ptr("none"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"}, Model: "Amazon EC2 NVMe Instance Storage"}
	nvmeNoModel = &sysfs.Device{Name: "nvme0n1", Class: sysfs.ClassNVMe, Path: "devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(2),
		Scheduler: ptr("none"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"}}
	loop = &sysfs.Device{Name: "loop0", Class: sysfs.ClassLoop, Path: "devices/virtual/block/loop0",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(1), Zoned: "none",
		Scheduler: ptr("none"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"}}
	mmc = &sysfs.Device{Name: "mmcblk0", Class: sysfs.ClassMMC, Path: "devices/platform/soc/mmc0/mmc0:0001/block/mmcblk0",
		Rotational: ptr(false), Removable: ptr(false), HWQueues: ptr(1),
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
)

// brief is a Write reduced to what the table compares.
type brief struct {
	where, attr, value string
	actions            string
	unknown            string
}

func briefs(ws []Write) []brief {
	var out []brief
	for _, w := range ws {
		out = append(out, brief{w.Where(), w.Attribute, w.Value, strings.Join(w.Actions, ","), strings.Join(w.Unknown, "; ")})
	}
	return out
}

func TestFor(t *testing.T) {
	t.Parallel()
	const (
		fedora  = "/usr/lib/udev/rules.d/60-block-scheduler.rules"
		suse    = "/usr/lib/udev/rules.d/60-io-scheduler.rules"
		suseEtc = "/etc/udev/rules.d/60-io-scheduler.rules"
		aws     = "/usr/lib/udev/rules.d/70-ec2-nvme-devices.rules"
		tp      = "/usr/lib/tuned/throughput-performance/tuned.conf"
		db      = "/etc/tuned/db/tuned.conf"
	)
	tests := []struct {
		tree string
		dev  *sysfs.Device
		want []brief
	}{
		// Fedora: every sd, mmc and sr disk on add, whatever it is.
		{"fedora", hdd, []brief{{fedora + ":5", "scheduler", "bfq", "add", ""}}},
		{"fedora", ssd, []brief{{fedora + ":5", "scheduler", "bfq", "add", ""}}},
		{"fedora", mmc, []brief{{fedora + ":5", "scheduler", "bfq", "add", ""}}},
		{"fedora", vda, nil},
		{"fedora", ebs, nil},
		{"fedora", loop, nil},

		// SUSE: bfq for a rotational disk with one hardware queue (its
		// TEST!="%S%p/mq/1" decided from the snapshot's count); none for
		// loops, then nothing more (the GOTO surely applies); virtio
		// disks left alone. No rule here sets DM_MULTIPATH_DEVICE_PATH,
		// so udevd skips the multipath rule.
		{"suse", hdd, []brief{{suse + ":38", "scheduler", "bfq", "add,change", ""}}},
		{"suse", ssd, nil},
		{"suse", loop, []brief{{suse + ":25", "scheduler", "none", "add,change", ""}}},
		{"suse", vda, nil},
		{"suse-masked", hdd, nil},
		{"suse-masked", loop, nil},
		// The admin's copy in /etc hides the shipped file: its option 1
		// takes a rotational single-queue virtio disk (and its GOTO skips
		// option 4), since "Leave virtual devices untouched" is out.
		{"suse-edited", vda, []brief{
			{suseEtc + ":38", "scheduler", "bfq", "add,change", ""},
		}},
		{"suse-edited", ssd, []brief{
			{suseEtc + ":48", "scheduler", "bfq", "add,change", ""},
		}},
		{"suse-edited", loop, []brief{
			{suseEtc + ":25", "scheduler", "none", "add,change", ""},
		}},

		// AWS: chosen by the model; a disk whose model is not known may
		// be either.
		{"aws", ebs, []brief{{aws + ":21", "io_timeout", "4294967295", "add,change", ""}}},
		{"aws", instanceStore, []brief{{aws + ":24", "io_timeout", "90000", "add,change", ""}}},
		{"aws", nvmeNoModel, []brief{
			{aws + ":21", "io_timeout", "4294967295", "add,change", `ATTRS{model}=="Amazon Elastic Block Store"`},
			{aws + ":24", "io_timeout", "90000", "add,change", `ATTRS{model}=="Amazon EC2 NVMe Instance Storage"`},
		}},
		{"aws", vda, nil},
		{"aws", loop, nil}, // the bdi rule is not a disk's

		// tuned: the merged [disk] unit (devices from db, readahead from
		// throughput-performance, elevator from db).
		{"tuned", hdd2, []brief{{db + ":8", "scheduler", "mq-deadline", "", ""}, {tp + ":17", "read_ahead_kb", "4096", "", ""}}},
		{"tuned", hdd, nil},      // !sda
		{"tuned", usbStick, nil}, // removable
		{"tuned", vda, nil},      // not sd*
	}
	for _, tt := range tests {
		t.Run(tt.tree+"/"+tt.dev.Name, func(t *testing.T) {
			s, err := Load(filepath.Join("testdata", tt.tree))
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Problems) > 0 {
				t.Errorf("problems: %q", s.Problems)
			}
			got := briefs(s.For(tt.dev))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("For(%s):\n got %q\nwant %q", tt.dev.Name, got, tt.want)
			}
		})
	}
}

func TestTunedCompare(t *testing.T) {
	t.Parallel()
	s, err := Load("testdata/tuned")
	if err != nil {
		t.Fatal(err)
	}
	var ra Write
	for _, w := range s.For(hdd2) {
		if w.Attribute == "read_ahead_kb" {
			ra = w
		}
	}
	if ra.Compare != '>' {
		t.Fatalf("readahead=>4096 read as %+v", ra)
	}
	for want, overrides := range map[string]bool{"128": true, "4095": true, "4096": false, "8192": false} {
		if got := ra.Overrides(want); got != overrides {
			t.Errorf("readahead=>4096 overrides %s: %v, want %v", want, got, overrides)
		}
	}
	if got, want := ra.Describe(), `tuned profile "db" (/usr/lib/tuned/throughput-performance/tuned.conf:17) sets read_ahead_kb to 4096 when it is lower`; got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
}

func TestParseUdevRules(t *testing.T) {
	t.Parallel()
	text := `# comment
KERNEL=="sd*", \
  # a comment inside a continuation is skipped
  ATTR{queue/read_ahead_kb}="1024",\
ATTR{queue/iosched/fifo_batch}:="8"
ENV{ID_X}=="a\"b", ATTR{bdi/read_ahead_kb}="64", ATTR{queue/rotational}=="1"
KERNEL=="x" ATTR{queue/nr_requests}=e"12\n"
broken line
ATTR{queue/scheduler}="unterminated
KERNEL==i"SD*", ATTR{queue/scheduler}="none"
`
	f, problems, err := parseUdevRules("/etc/udev/rules.d/10-x.rules", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Errorf("problems = %q", problems)
	}
	// udevd 252 refuses the broken line, the unterminated value and the
	// i"..." prefix (added in 256), each as "Invalid key/value pair".
	want := []Rejection{
		{"/etc/udev/rules.d/10-x.rules", 8, "Invalid key/value pair, ignoring."},
		{"/etc/udev/rules.d/10-x.rules", 9, "Invalid key/value pair, ignoring."},
		{"/etc/udev/rules.d/10-x.rules", 10, "Invalid key/value pair, ignoring."},
	}
	if !reflect.DeepEqual(f.rejected, want) {
		t.Errorf("rejected = %v, want %v", f.rejected, want)
	}
	type w struct {
		rule, line int
		attr, v    string
	}
	var got []w
	for _, r := range f.rules {
		for _, x := range r.tokens {
			if x.typ == tkAssignAttr && x.queue != "" {
				got = append(got, w{r.line, x.line, x.queue, x.value})
			}
		}
	}
	wantW := []w{{5, 4, "read_ahead_kb", "1024"}, {5, 5, "iosched/fifo_batch", "8"}, {6, 6, "read_ahead_kb", "64"}, {7, 7, "nr_requests", "12\n"}}
	if !reflect.DeepEqual(got, wantW) {
		t.Errorf("writes:\n got %v\nwant %v", got, wantW)
	}
	if m := f.rules[1].tokens[0]; m.value != `a"b` {
		t.Errorf("escaped quote: %q", m.value)
	}
}

func TestFnmatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"sd*[!0-9]", "sda", true}, {"sd*[!0-9]", "sda1", false}, {"sd*[!0-9]", "sd", false},
		{"loop59[0-9][0-9]", "loop5901", true}, {"loop59[0-9][0-9]", "loop590", false}, {"loop59[0-9][0-9]", "loop59011", false},
		{"nvme[0-9]*n[0-9]*", "nvme0n1", true}, {"nvme[0-9]*n[0-9]*", "nvme0", false},
		{"*", "", true}, {"?", "", false}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false},
		{"[^a]x", "bx", true}, {"[^a]x", "ax", false}, {`\*`, "*", true}, {`\*`, "a", false},
		{"[]x]", "]", true}, {"[a", "[a", true}, {"vd[a-z]*", "vdb", true}, {"*/x", "a/b/x", true},
	} {
		if got := fnmatch(tc.p, tc.s); got != tc.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

// A rules file with no queue write, an unreadable one, a non-.rules file
// and a dangling link are handled as udevd does; the order is by name
// across directories.
func TestListUdevRules(t *testing.T) {
	t.Parallel()
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
	write("usr/lib/udev/rules.d/90-b.rules", `ATTR{queue/scheduler}="bfq"`+"\n")
	write("run/udev/rules.d/10-a.rules", `ATTR{queue/scheduler}="kyber"`+"\n")
	write("etc/udev/rules.d/90-b.rules", `ATTR{queue/scheduler}="none"`+"\n")
	write("usr/lib/udev/rules.d/50-c.rules.bak", `ATTR{queue/scheduler}="x"`+"\n")
	write("usr/lib/udev/rules.d/20-empty.rules", "")
	write("lib/udev/rules.d/20-empty.rules", `ATTR{queue/scheduler}="masked by the empty file"`+"\n")
	if err := os.Symlink("nowhere", filepath.Join(root, "etc/udev/rules.d/30-dangling.rules")); err != nil {
		t.Fatal(err)
	}
	s, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range s.For(loop) {
		got = append(got, w.Where()+" "+w.Value)
	}
	want := []string{"/run/udev/rules.d/10-a.rules:1 kyber", "/etc/udev/rules.d/90-b.rules:1 none"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
