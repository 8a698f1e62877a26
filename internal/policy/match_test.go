package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
)

func ptr[T any](v T) *T { return &v }

// vda is this project's test machine's disk: single-queue virtio-blk that
// claims to rotate.
func vda() *sysfs.Device {
	return &sysfs.Device{
		Name: "vda", Class: sysfs.ClassVirtio, Driver: "virtio_blk",
		Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1),
		SizeBytes: ptr(uint64(20 << 30)), Scheduler: ptr("mq-deadline"),
		Schedulers: []string{"mq-deadline", "kyber", "none"},
	}
}

func with(d *sysfs.Device, f func(*sysfs.Device)) *sysfs.Device {
	f(d)
	return d
}

// mustParse parses one file or fails the test.
func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse(File{Name: "p.toml", Data: []byte(src)})
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return p
}

func TestMatchKeys(t *testing.T) {
	t.Parallel()
	hdd := &sysfs.Device{
		Name: "sda", Class: sysfs.ClassSCSI, Driver: "sd", Transport: "ahci",
		Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1), SizeBytes: ptr(uint64(4 << 40)),
		Model: "ST4000DM004-2CV1", Vendor: "ATA", Serial: "ZFN1ABCD",
		Properties: map[string]string{"ID_BUS": "ata", "ID_PATH": "pci-0000:00:1f.2-ata-1"},
	}
	tests := []struct {
		name    string
		match   string // the body of [rule.match]
		dev     *sysfs.Device
		matched bool
		reasons []string
	}{
		{"empty match matches every disk", ``, vda(), true, nil},
		{"class", `class = "virtio"`, vda(), true, nil},
		{"class list", `class = ["nvme", "virtio"]`, vda(), true, nil},
		{"class mismatch", `class = "nvme"`, vda(), false, []string{"class: virtio is not in [nvme]"}},
		{"name glob", `name = "vd*"`, vda(), true, nil},
		{"name glob list", `name = ["loop7[0-9][0-9][0-9]"]`, with(vda(), func(d *sysfs.Device) { d.Name = "loop7001" }), true, nil},
		{"name glob mismatch", `name = ["loop7[0-9][0-9][0-9]", "sd?"]`, with(vda(), func(d *sysfs.Device) { d.Name = "loop70" }), false,
			[]string{"name: loop70 matches none of [loop7[0-9][0-9][0-9] sd?]"}},
		{"driver", `driver = "virtio_blk"`, vda(), true, nil},
		{"driver unknown", `driver = "virtio_blk"`, with(vda(), func(d *sysfs.Device) { d.Driver = "" }), false,
			[]string{"driver: unknown (no driver reported)"}},
		{"transport", `transport = ["ahci", "mpt3sas"]`, hdd, true, nil},
		{"transport mismatch", `transport = "virtio_scsi"`, hdd, false, []string{"transport: ahci is not in [virtio_scsi]"}},
		{"transport unknown", `transport = "virtio_scsi"`, vda(), false, []string{"transport: unknown (not reported for this disk)"}},
		{"rotational", `rotational = true`, vda(), true, nil},
		{"rotational mismatch", `rotational = false`, vda(), false, []string{"rotational: true, want false"}},
		{"rotational unknown never matches", `rotational = true`, with(vda(), func(d *sysfs.Device) { d.Rotational = nil }), false,
			[]string{"rotational: unknown (not reported by the kernel)"}},
		{"removable", `removable = false`, vda(), true, nil},
		{"removable unknown", `removable = false`, with(vda(), func(d *sysfs.Device) { d.Removable = nil }), false,
			[]string{"removable: unknown (not reported by the kernel)"}},
		{"nowait", `nowait = true`, with(vda(), func(d *sysfs.Device) { d.NoWait = ptr(true) }), true, nil},
		{"nowait mismatch", `nowait = true`, with(vda(), func(d *sysfs.Device) { d.NoWait = ptr(false) }), false, []string{"nowait: false, want true"}},
		{"nowait unknown says why", `nowait = false`, with(vda(), func(d *sysfs.Device) { d.NoWaitReason = "open /dev/vda: permission denied" }), false,
			[]string{"nowait: unknown (not tested: open /dev/vda: permission denied)"}},
		{"hw_queues exact", `hw_queues = 1`, vda(), true, nil},
		{"hw_queues exact mismatch", `hw_queues = 2`, vda(), false, []string{"hw_queues: 1 is not 2"}},
		{"hw_queues min", `hw_queues = { min = 2 }`, vda(), false, []string{"hw_queues: 1 is below 2"}},
		{"hw_queues max", `hw_queues = { max = 4 }`, with(vda(), func(d *sysfs.Device) { d.HWQueues = ptr(8) }), false, []string{"hw_queues: 8 is above 4"}},
		{"hw_queues range", `hw_queues = { min = 2, max = 64 }`, with(vda(), func(d *sysfs.Device) { d.HWQueues = ptr(8) }), true, nil},
		{"hw_queues 0 is bio-based", `hw_queues = 0`, with(vda(), func(d *sysfs.Device) { d.HWQueues = ptr(0); d.Scheduler = nil }), true, nil},
		// No mq/ in a copied tree: unknown, never 0, and the file named.
		{"hw_queues unknown never matches, not even 0", `hw_queues = { max = 64 }`, with(vda(), func(d *sysfs.Device) {
			d.HWQueues = nil
			d.Missing = map[string]string{"hw_queues": "mq/"}
		}), false, []string{"hw_queues: unknown (mq/ is missing)"}},
		{"rotational missing names its file", `rotational = true`, with(vda(), func(d *sysfs.Device) {
			d.Rotational = nil
			d.Missing = map[string]string{"rotational": "queue/rotational"}
		}), false, []string{"rotational: unknown (queue/rotational is missing)"}},
		{"size range", `size = { min = "1GiB", max = "64TiB" }`, vda(), true, nil},
		{"size min", `size = { min = "32G" }`, vda(), false, []string{"size: 20GiB is below 32GiB"}},
		{"size max in bytes", `size = { max = 1073741824 }`, vda(), false, []string{"size: 20GiB is above 1GiB"}},
		{"size unknown", `size = { min = 1 }`, with(vda(), func(d *sysfs.Device) { d.SizeBytes = nil }), false,
			[]string{"size: unknown (not reported by the kernel)"}},
		{"model", `model = "^ST4000"`, hdd, true, nil},
		{"model any of", `model = ["^WDC", "DM004"]`, hdd, true, nil},
		{"model unknown", `model = ".*"`, vda(), false, []string{"model: unknown (not reported by the kernel)"}},
		{"vendor mismatch", `vendor = "^QEMU$"`, hdd, false, []string{`vendor: "ATA" does not match "^QEMU$"`}},
		{"serial mismatch list", `serial = ["^X", "^Y"]`, hdd, false, []string{`serial: "ZFN1ABCD" matches none of ["^X" "^Y"]`}},
		{"property glob", `property = { ID_BUS = "at*", ID_PATH = ["pci-*-ata-?"] }`, hdd, true, nil},
		{"property mismatch", `property = { ID_BUS = ["scsi", "usb"] }`, hdd, false, []string{`property.ID_BUS: "ata" matches none of [scsi usb]`}},
		{"property not set", `property = { ID_SERIAL = "*" }`, hdd, false, []string{"property.ID_SERIAL: not set"}},
		{"property unknown without udev", `property = { ID_BUS = "ata" }`, vda(), false,
			[]string{`property.ID_BUS: unknown (no udev properties for this disk: they come with uevent_source = "udev")`}},
		{"every failing key is reported, in order", "serial = \"^X\"\nclass = \"nvme\"\nhw_queues = { min = 2 }\nrotational = true", vda(), false,
			[]string{"class: virtio is not in [nvme]", "hw_queues: 1 is below 2", "serial: unknown (not reported by the kernel)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, "[[rule]]\nname = \"r\"\n[rule.match]\n"+tt.match+"\n")
			ok, reasons := p.Rules[0].Matches(tt.dev)
			if ok != tt.matched || !reflect.DeepEqual(reasons, tt.reasons) {
				t.Errorf("Matches = %v, %q; want %v, %q", ok, reasons, tt.matched, tt.reasons)
			}
		})
	}
}

func TestExcept(t *testing.T) {
	t.Parallel()
	loop := &sysfs.Device{Name: "loop7", Class: sysfs.ClassLoop, Driver: "loop", Rotational: ptr(false), HWQueues: ptr(1)}
	tests := []struct {
		name    string
		src     string // after [[rule]] name = "r"
		dev     *sysfs.Device
		matched bool
		reasons []string
	}{
		{"except holds", "[rule.except]\nclass = \"loop\"\n", loop, false, []string{"except: class: loop is in [loop]"}},
		{"except does not hold", "[rule.except]\nclass = \"loop\"\n", vda(), true, nil},
		{"every except key must hold", "[rule.except]\nclass = \"loop\"\nname = \"loop1*\"\n", loop, true, nil},
		{"all except keys holding are all named", "[rule.except]\nclass = \"loop\"\nname = \"loop*\"\n", loop, false,
			[]string{"except: class: loop is in [loop]", "except: name: loop7 matches loop*"}},
		{"an empty except excludes nothing", "[rule.except]\n", loop, true, nil},
		{"an unknown fact does not hold in except either", "[rule.except]\nrotational = true\n",
			with(vda(), func(d *sysfs.Device) { d.Rotational = nil }), true, nil},
		{"unknown hw_queues does not hold in except", "[rule.except]\nhw_queues = { max = 1 }\n",
			with(vda(), func(d *sysfs.Device) { d.HWQueues = nil; d.Missing = map[string]string{"hw_queues": "mq/"} }), true, nil},
		{"any of several except tables", "[[rule.except]]\nclass = \"nvme\"\n[[rule.except]]\nrotational = true\nhw_queues = 1\n", vda(), false,
			[]string{"except: rotational: true", "except: hw_queues: 1"}},
		{"none of several except tables", "[[rule.except]]\nclass = \"nvme\"\n[[rule.except]]\nrotational = false\n", vda(), true, nil},
		{"match fails first: except is not reported", "[rule.match]\nclass = \"nvme\"\n[rule.except]\nclass = \"virtio\"\n", vda(), false,
			[]string{"class: virtio is not in [nvme]"}},
		{"match and except", "[rule.match]\nclass = \"virtio\"\n[rule.except]\nsize = { max = \"32GiB\" }\n", vda(), false,
			[]string{"except: size: 20GiB is within [..32GiB]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, "[[rule]]\nname = \"r\"\n"+tt.src)
			ok, reasons := p.Rules[0].Matches(tt.dev)
			if ok != tt.matched || !reflect.DeepEqual(reasons, tt.reasons) {
				t.Errorf("Matches = %v, %q; want %v, %q", ok, reasons, tt.matched, tt.reasons)
			}
		})
	}
}

func TestEvaluateMerges(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `
[[rule]]
name = "base"
[rule.set]
scheduler = "mq-deadline"
nr_requests = 64
read_ahead_kb = 128
[rule.set.iosched]
fifo_batch = 8

[[rule]]
name = "virtio"
[rule.match]
class = "virtio"
[rule.set]
scheduler = "none"

[[rule]]
name = "nvme"
[rule.match]
class = "nvme"
[rule.set]
scheduler = "kyber"

[[rule]]
name = "last"
[rule.set]
scheduler = ["bfq", "none"]
read_ahead_kb = 256
wbt_lat_usec = 0
`)
	got := p.Evaluate(vda())
	want := Evaluation{
		Rules: []RuleResult{
			{Rule: "base", Index: 1, Matched: true},
			{Rule: "virtio", Index: 2, Matched: true},
			{Rule: "nvme", Index: 3, Reasons: []string{"class: virtio is not in [nvme]"}},
			{Rule: "last", Index: 4, Matched: true},
		},
		Matched: []string{"base", "virtio", "last"},
		Settings: []Setting{
			{Attribute: "scheduler", Values: []string{"bfq", "none"}, Rule: "last", Overrode: []string{"base", "virtio"}},
			{Attribute: "nr_requests", Values: []string{"64"}, Rule: "base"},
			{Attribute: "iosched/fifo_batch", Values: []string{"8"}, Rule: "base"},
			{Attribute: "read_ahead_kb", Values: []string{"256"}, Rule: "last", Overrode: []string{"base"}},
			{Attribute: "wbt_lat_usec", Values: []string{"0"}, Rule: "last"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Evaluate:\n got %+v\nwant %+v", got, want)
	}

	// The evaluation is the caller's: changing it changes nothing in the
	// policy.
	got.Settings[0].Values[0] = "kyber"
	if again := p.Evaluate(vda()); again.Settings[0].Values[0] != "bfq" {
		t.Errorf("Evaluate shares its slices with the policy: %v", again.Settings[0].Values)
	}

	// No rule matching: empty, non-nil lists (they are JSON for plan and
	// explain).
	none := mustParse(t, "[[rule]]\nname = \"n\"\n[rule.match]\nclass = \"nvme\"\n").Evaluate(vda())
	if none.Matched == nil || none.Settings == nil || len(none.Matched)+len(none.Settings) != 0 {
		t.Errorf("Evaluate with no match = %+v, want empty non-nil Matched and Settings", none)
	}
}

// TestEmbeddedPolicyDecisions checks what the default policy does to the
// kinds of disk it documents; vda is this project's test machine.
func TestEmbeddedPolicyDecisions(t *testing.T) {
	t.Parallel()
	p, err := Parse(File{Name: EmbeddedName, Data: Embedded()})
	if err != nil {
		t.Fatal(err)
	}
	scsi := func(f func(*sysfs.Device)) *sysfs.Device {
		d := &sysfs.Device{Name: "sda", Class: sysfs.ClassSCSI, Driver: "sd", Transport: "ahci",
			Rotational: ptr(true), Removable: ptr(false), HWQueues: ptr(1), Vendor: "ATA", Model: "ST4000DM004-2CV1"}
		f(d)
		return d
	}
	tests := []struct {
		name string
		dev  *sysfs.Device
		want string // the scheduler setting, "" for none at all
	}{
		{"vda: single-queue virtio keeps the kernel's choice", vda(), ""},
		{"multi-queue virtio: none", with(vda(), func(d *sysfs.Device) { d.HWQueues = ptr(4) }), "none"},
		{"multi-queue nvme: none", &sysfs.Device{Name: "nvme0n1", Class: sysfs.ClassNVMe, Rotational: ptr(false), HWQueues: ptr(2)}, "none"},
		{"single-queue nvme: kernel's choice", &sysfs.Device{Name: "nvme0n1", Class: sysfs.ClassNVMe, Rotational: ptr(false), HWQueues: ptr(1)}, ""},
		{"ublk: none", &sysfs.Device{Name: "ublkb0", Class: sysfs.ClassUBLK, HWQueues: ptr(1)}, "none"},
		{"loop: none", &sysfs.Device{Name: "loop0", Class: sysfs.ClassLoop, HWQueues: ptr(1)}, "none"},
		{"zram: nothing (bio-based)", &sysfs.Device{Name: "zram0", Class: sysfs.ClassZRAM}, ""},
		{"real hdd: mq-deadline", scsi(func(*sysfs.Device) {}), "mq-deadline,bfq"},
		{"ssd: nothing", scsi(func(d *sysfs.Device) { d.Rotational = ptr(false) }), ""},
		{"scsi with unknown rotation: nothing", scsi(func(d *sysfs.Device) { d.Rotational = nil }), ""},
		{"virtio-scsi claiming rotation: nothing", scsi(func(d *sysfs.Device) { d.Transport = "virtio_scsi"; d.Vendor = "QEMU"; d.Model = "QEMU HARDDISK" }), ""},
		{"qemu emulated sata: nothing", scsi(func(d *sysfs.Device) { d.Model = "QEMU HARDDISK" }), ""},
		{"hyper-v: nothing", scsi(func(d *sysfs.Device) { d.Transport = "storvsc"; d.Vendor = "Msft"; d.Model = "Virtual Disk" }), ""},
		{"gce persistent disk: nothing", scsi(func(d *sysfs.Device) { d.Transport = "virtio_scsi"; d.Vendor = "Google"; d.Model = "PersistentDisk" }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := p.Evaluate(tt.dev)
			got := ""
			for _, s := range ev.Settings {
				if s.Attribute == "scheduler" {
					got = strings.Join(s.Values, ",")
				} else {
					t.Errorf("the default policy sets %s; it only chooses schedulers", s.Attribute)
				}
			}
			if got != tt.want {
				t.Errorf("scheduler = %q, want %q (rules %+v)", got, tt.want, ev.Rules)
			}
		})
	}

	// On vda the default changes nothing but names the rule that explains
	// why, so `iosched plan` on this machine shows it.
	if ev := p.Evaluate(vda()); len(ev.Matched) != 1 || !strings.Contains(ev.Matched[0], "single-queue") {
		t.Errorf("vda matched %q, want exactly the single-queue rule", ev.Matched)
	}
}

// TestEvaluateUntilStopsBetweenRules: the stop is asked before each rule,
// and once it says yes no further rule is evaluated.
func TestEvaluateUntilStopsBetweenRules(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	for i := range 50 {
		fmt.Fprintf(&src, "[[rule]]\nname = \"r%d\"\n[rule.set]\nread_ahead_kb = %d\n", i, 128+4*i)
	}
	p := mustParse(t, src.String())
	asked := 0
	ev, done := p.EvaluateUntil(vda(), func() bool { asked++; return asked > 10 })
	if done || asked != 11 || len(ev.Rules) != 10 {
		t.Errorf("stopped at the 11th ask: done %v, asked %d, %d rules evaluated; want false, 11, 10", done, asked, len(ev.Rules))
	}
	ev, done = p.EvaluateUntil(vda(), func() bool { return false })
	if !done || len(ev.Rules) != 50 || !reflect.DeepEqual(ev, p.Evaluate(vda())) {
		t.Errorf("never stopped: done %v, %d rules; want the whole evaluation", done, len(ev.Rules))
	}
}
