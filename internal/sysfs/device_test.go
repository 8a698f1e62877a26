package sysfs

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/treetest"
)

// The fixture trees, relative to this package's directory. See
// testdata/sysfs/README.md for what each holds.
const (
	cloudTree     = "../../testdata/sysfs/cloud"
	brokenTree    = "../../testdata/sysfs/broken"
	classOnlyTree = "../../testdata/sysfs/classonly"
)

func newFS(t *testing.T, root string) FS {
	t.Helper()
	fs, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

var (
	all4   = []string{"none", "mq-deadline", "kyber", "bfq"}
	noBFQ  = []string{"none", "mq-deadline", "kyber"}
	noneOf = []string{}
)

// cloudDisks is what every disk of the cloud tree must read as. The test
// fails if the tree gains or loses a disk without this table following.
var cloudDisks = []struct {
	name       string
	class      Class
	driver     string
	transport  string
	dmName     string
	multipath  bool
	hwq        int // -1: unknown (nil)
	rotational bool
	scheduler  string // "" for a bio-based disk (nil)
	// unknownSched: no queue/scheduler and no evidence of a bio-based
	// queue, so the scheduler is unknown (nil, and not bio-based).
	unknownSched bool
	schedulers   []string
	majorMinor   string
	sizeBytes    uint64
	model        string
	hidden       bool
}{
	{name: "dm-0", class: ClassDM, driver: "device-mapper", dmName: "vg0-data", hwq: -1, unknownSched: true, rotational: true, schedulers: noneOf, majorMinor: "252:0", sizeBytes: 10 << 30},
	{name: "dm-1", class: ClassDM, driver: "device-mapper", dmName: "mpatha", multipath: true, hwq: 1, scheduler: "mq-deadline", schedulers: all4, majorMinor: "252:1", sizeBytes: 200 << 30},
	{name: "loop0", class: ClassLoop, driver: "loop", hwq: 1, scheduler: "none", schedulers: all4, majorMinor: "7:0", sizeBytes: 100 << 20},
	{name: "md0", class: ClassMD, driver: "md", hwq: 0, schedulers: noneOf, majorMinor: "9:0", sizeBytes: 2 << 30},
	{name: "mmcblk0", class: ClassMMC, driver: "mmcblk", hwq: 1, scheduler: "mq-deadline", schedulers: noBFQ, majorMinor: "179:0", sizeBytes: 124735488 * 512, model: "SC64G"},
	{name: "nbd0", class: ClassNBD, driver: "nbd", hwq: 1, scheduler: "kyber", schedulers: all4, majorMinor: "43:0", sizeBytes: 10 << 30},
	{name: "nullb0", class: ClassUnknown, driver: "", hwq: 2, scheduler: "none", schedulers: all4, majorMinor: "248:0", sizeBytes: 250 << 30},
	{name: "nvme0n1", class: ClassNVMe, driver: "nvme", transport: "pcie", hwq: 2, scheduler: "none", schedulers: all4, majorMinor: "259:0", sizeBytes: 50 << 30, model: "Amazon Elastic Block Store"},
	{name: "nvme1c1n1", class: ClassNVMe, driver: "nvme", transport: "tcp", hwq: 2, scheduler: "none", schedulers: all4, majorMinor: "259:2", sizeBytes: 1 << 40, model: "NetApp ONTAP Controller", hidden: true},
	{name: "nvme1n1", class: ClassNVMe, driver: "nvme", hwq: 0, schedulers: noneOf, majorMinor: "259:1", sizeBytes: 1 << 40, model: "NetApp ONTAP Controller"},
	{name: "pmem0", class: ClassPMem, driver: "nd_pmem", hwq: 0, schedulers: noneOf, majorMinor: "259:5", sizeBytes: 16 << 30},
	{name: "ram0", class: ClassRAM, driver: "brd", hwq: 0, schedulers: noneOf, majorMinor: "1:0", sizeBytes: 4 << 20},
	{name: "rbd0", class: ClassRBD, driver: "rbd", hwq: 1, scheduler: "none", schedulers: all4, majorMinor: "249:0", sizeBytes: 100 << 30},
	{name: "sda", class: ClassSCSI, driver: "sd", transport: "virtio_scsi", hwq: 2, rotational: true, scheduler: "none", schedulers: all4, majorMinor: "8:0", sizeBytes: 10 << 30, model: "PersistentDisk"},
	{name: "sdb", class: ClassSCSI, driver: "sd", transport: "ahci", hwq: 1, rotational: true, scheduler: "bfq", schedulers: all4, majorMinor: "8:16", sizeBytes: 7814037168 * 512, model: "ST4000NM0035-1V4"},
	{name: "sdc", class: ClassSCSI, driver: "sd", transport: "storvsc", hwq: 2, rotational: true, scheduler: "mq-deadline", schedulers: all4, majorMinor: "8:32", sizeBytes: 32 << 30, model: "Virtual Disk"},
	{name: "sdd", class: ClassSCSI, driver: "sd", transport: "iscsi_tcp", hwq: 1, scheduler: "mq-deadline", schedulers: all4, majorMinor: "8:48", sizeBytes: 200 << 30, model: "LUN C-Mode"},
	{name: "sr0", class: ClassSCSI, driver: "sr", transport: "ata_piix", hwq: 1, rotational: true, scheduler: "mq-deadline", schedulers: all4, majorMinor: "11:0", sizeBytes: 0, model: "QEMU DVD-ROM"},
	{name: "ublkb0", class: ClassUBLK, driver: "ublk_drv", hwq: 4, scheduler: "none", schedulers: all4, majorMinor: "250:0", sizeBytes: 1 << 30},
	{name: "vda", class: ClassVirtio, driver: "virtio_blk", hwq: 1, rotational: true, scheduler: "mq-deadline", schedulers: all4, majorMinor: "254:0", sizeBytes: 20 << 30},
	{name: "vdb", class: ClassVirtio, driver: "virtio_blk", hwq: 2, rotational: true, scheduler: "none", schedulers: all4, majorMinor: "254:16", sizeBytes: 100 << 30},
	{name: "xvda", class: ClassXen, driver: "vbd", hwq: 1, scheduler: "mq-deadline", schedulers: all4, majorMinor: "202:0", sizeBytes: 8 << 30},
	{name: "zram0", class: ClassZRAM, driver: "zram", hwq: 0, schedulers: noneOf, majorMinor: "251:0", sizeBytes: 4 << 30},
}

func TestDisksCloud(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)
	got, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range cloudDisks {
		want = append(want, d.name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Disks() = %q\nwant      %q", got, want)
	}
	// The tree has partitions in class/block; none is a disk.
	for _, p := range []string{"vda1", "vda2", "nvme0n1p1", "sda1", "mmcblk0p1", "xvda1"} {
		if _, err := os.Lstat(filepath.Join(cloudTree, "class", "block", p, "partition")); err != nil {
			t.Fatalf("fixture lost partition %s: %v", p, err)
		}
		if slices.Contains(got, p) {
			t.Errorf("Disks() lists partition %s", p)
		}
		if _, err := fs.Device(p); !errors.Is(err, ErrNoDevice) {
			t.Errorf("Device(%s) = %v, want ErrNoDevice (a partition)", p, err)
		}
	}
}

func TestDeviceCloud(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)
	for _, w := range cloudDisks {
		t.Run(w.name, func(t *testing.T) {
			d, err := fs.Device(w.name)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Errors) != 0 {
				t.Errorf("Errors = %q, want none", d.Errors)
			}
			check := func(what string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("Class", d.Class, w.class)
			check("Driver", d.Driver, w.driver)
			check("Transport", d.Transport, w.transport)
			check("DMName", d.DMName, w.dmName)
			check("Multipath", d.Multipath, w.multipath)
			if w.hwq < 0 {
				check("HWQueues", fmtPtr(d.HWQueues), "nil")
			} else {
				check("HWQueues", fmtPtr(d.HWQueues), w.hwq)
			}
			check("MajorMinor", d.MajorMinor, w.majorMinor)
			check("Model", d.Model, w.model)
			check("Hidden", d.Hidden, w.hidden)
			if d.Rotational == nil || *d.Rotational != w.rotational {
				t.Errorf("Rotational = %v, want %v", fmtPtr(d.Rotational), w.rotational)
			}
			if d.SizeBytes == nil || *d.SizeBytes != w.sizeBytes {
				t.Errorf("SizeBytes = %v, want %d", fmtPtr(d.SizeBytes), w.sizeBytes)
			}
			if d.Removable == nil {
				t.Error("Removable unknown")
			}
			switch {
			case w.scheduler == "" && d.Scheduler != nil:
				t.Errorf("Scheduler = %q, want nil (bio-based)", *d.Scheduler)
			case w.scheduler != "" && (d.Scheduler == nil || *d.Scheduler != w.scheduler):
				t.Errorf("Scheduler = %v, want %q", fmtPtr(d.Scheduler), w.scheduler)
			}
			check("BioBased", d.BioBased(), w.scheduler == "" && !w.unknownSched)
			if !slices.Equal(d.Schedulers, w.schedulers) {
				t.Errorf("Schedulers = %q, want %q", d.Schedulers, w.schedulers)
			}
			if !strings.HasPrefix(d.Path, "devices/") || !strings.HasSuffix(d.Path, "/"+w.name) {
				t.Errorf("Path = %q, want devices/.../%s relative to the root", d.Path, w.name)
			}
			if _, err := os.Stat(filepath.Join(cloudTree, d.Path)); err != nil {
				t.Errorf("Path %q does not resolve inside the tree: %v", d.Path, err)
			}
		})
	}
}

func fmtPtr[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// TestCloudCoversEveryClass keeps the fixture honest: each class policies can
// match has at least one disk to be tested on.
func TestCloudCoversEveryClass(t *testing.T) {
	t.Parallel()
	seen := map[Class]bool{}
	for _, d := range cloudDisks {
		seen[d.class] = true
	}
	for _, c := range Classes {
		if !seen[c] {
			t.Errorf("no fixture disk of class %s", c)
		}
	}
}

func TestDeviceTunables(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)

	vda, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"read_ahead_kb": "8192", "nr_requests": "256", "nomerges": "0", "rq_affinity": "1",
		"add_random": "0", "iostats": "1", "wbt_lat_usec": "75000", "max_sectors_kb": "4096",
	}
	if !maps.Equal(vda.Tunables, want) {
		t.Errorf("vda Tunables = %v\nwant %v", vda.Tunables, want)
	}
	if got := vda.IOSched["read_expire"]; got != "500" || len(vda.IOSched) != 7 {
		t.Errorf("vda IOSched = %v, want the 7 mq-deadline parameters", vda.IOSched)
	}
	if *vda.LogicalBlockSize != 512 || *vda.PhysicalBlockSize != 4096 || vda.Zoned != "none" {
		t.Errorf("vda block sizes %d/%d zoned %q", *vda.LogicalBlockSize, *vda.PhysicalBlockSize, vda.Zoned)
	}
	if vda.Serial != "vol-root" || vda.Vendor != "0x1af4" {
		t.Errorf("vda serial %q vendor %q", vda.Serial, vda.Vendor)
	}

	sdb, err := fs.Device("sdb")
	if err != nil {
		t.Fatal(err)
	}
	if sdb.IOSched["low_latency"] != "1" || sdb.IOSched["slice_idle"] != "8" {
		t.Errorf("sdb (bfq) IOSched = %v", sdb.IOSched)
	}
	if sdb.Tunables["io_timeout"] != "30000" || sdb.Tunables["wbt_lat_usec"] != "0" {
		t.Errorf("sdb Tunables = %v", sdb.Tunables)
	}
	if sdb.Vendor != "ATA" || sdb.WWID != "naa.5000c500a1b2c3d4" {
		t.Errorf("sdb vendor %q wwid %q: want padding trimmed", sdb.Vendor, sdb.WWID)
	}

	nbd, err := fs.Device("nbd0")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(nbd.IOSched, map[string]string{"read_lat_nsec": "2000000", "write_lat_nsec": "10000000"}) {
		t.Errorf("nbd0 (kyber) IOSched = %v", nbd.IOSched)
	}

	nvme, err := fs.Device("nvme0n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(nvme.IOSched) != 0 {
		t.Errorf("nvme0n1 runs none, IOSched = %v", nvme.IOSched)
	}
	if nvme.Serial != "vol0a1b2c3d4e5f60718" || !strings.HasPrefix(nvme.WWID, "nvme.1d0f-") {
		t.Errorf("nvme0n1 serial %q wwid %q: want the controller's serial, the namespace's wwid", nvme.Serial, nvme.WWID)
	}

	// A bio-based disk hides the blk-mq-only tunables
	// (block/blk-sysfs.c blk_mq_queue_attr_visible).
	zram, err := fs.Device("zram0")
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"nr_requests", "rq_affinity", "wbt_lat_usec", "io_timeout"} {
		if v, ok := zram.Tunables[hidden]; ok {
			t.Errorf("zram0 Tunables[%s] = %q, want absent", hidden, v)
		}
	}
	if zram.Tunables["read_ahead_kb"] != "128" || len(zram.IOSched) != 0 {
		t.Errorf("zram0 Tunables = %v IOSched = %v", zram.Tunables, zram.IOSched)
	}
}

func TestDeviceInvalidName(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)
	// "../block/vda" would resolve to a real disk of the tree if it were
	// ever joined into a path.
	for _, n := range []string{"", "..", "../block/vda", "block/vda", "vda\x00"} {
		if _, err := fs.Device(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Device(%q) = %v, want ErrInvalidName", n, err)
		}
		if fs.Exists(n) {
			t.Errorf("Exists(%q) = true", n)
		}
		if _, err := fs.QueueAttrPath(n, "scheduler"); !errors.Is(err, ErrInvalidName) {
			t.Errorf("QueueAttrPath(%q) = %v, want ErrInvalidName", n, err)
		}
	}
}

func TestDeviceMissing(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)
	_, err := fs.Device("vdq")
	if !errors.Is(err, ErrNoDevice) || !Gone(err) {
		t.Fatalf("Device(vdq) = %v, want ErrNoDevice", err)
	}
	if !strings.Contains(err.Error(), "vdq") {
		t.Errorf("error %q does not name the device", err)
	}
	if fs.Exists("vdq") || !fs.Exists("vda") {
		t.Error("Exists wrong")
	}
}

// brokenDisks lists, for each disk of the broken tree, the errors it must
// report, one per bad attribute.
var brokenDisks = map[string][]string{
	"ram0": {},
	"sda": {
		`removable: not 0 or 1: "2"`,
		`size: not a number: "-1"`,
		`queue/rotational: not 0 or 1: "banana"`,
		`queue/logical_block_size: not a number: "0x200"`,
	},
	"vdb": {`queue/scheduler: no active scheduler marked in "none mq-deadline kyber"`},
	"vdc": {
		`dev: no such file or directory`,
		`queue/scheduler: more than one active in "[none] [mq-deadline]"`,
	},
	"vdd": {
		`dev: not major:minor: "254-48"`,
		`queue/scheduler: empty`,
	},
	"vde": {},
}

func TestBrokenTree(t *testing.T) {
	t.Parallel()
	fs := newFS(t, brokenTree)
	names, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	// vdz is listed (its links are there) but gone when read.
	want := slices.Sorted(maps.Keys(brokenDisks))
	want = append(want, "vdz")
	if !slices.Equal(names, want) {
		t.Fatalf("Disks() = %q, want %q", names, want)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			d, err := fs.Device(name)
			if name == "vdz" {
				if !errors.Is(err, ErrNoDevice) {
					t.Fatalf("Device(vdz) with a dangling link = %v, %v; want ErrNoDevice", d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Errors, brokenDisks[name]) {
				t.Errorf("Errors = %q\nwant     %q", d.Errors, brokenDisks[name])
			}
		})
	}

	// What garbage hides is unknown, and nothing else is lost.
	sda, _ := fs.Device("sda")
	if sda.Rotational != nil || sda.SizeBytes != nil || sda.Removable != nil || sda.LogicalBlockSize != nil {
		t.Errorf("sda garbage read as values: rot %v size %v removable %v lbs %v",
			fmtPtr(sda.Rotational), fmtPtr(sda.SizeBytes), fmtPtr(sda.Removable), fmtPtr(sda.LogicalBlockSize))
	}
	if sda.Class != ClassSCSI || sda.Transport != "virtio_scsi" || fmtPtr(sda.Scheduler) != "mq-deadline" || sda.MajorMinor != "8:0" {
		t.Errorf("sda lost good attributes: %+v", sda)
	}

	// A scheduler file that cannot be parsed leaves the scheduler unknown,
	// not bio-based: the queue has hardware queues.
	vdb, _ := fs.Device("vdb")
	if vdb.Scheduler != nil || len(vdb.Schedulers) != 0 || vdb.BioBased() {
		t.Errorf("vdb Scheduler %v Schedulers %q BioBased %v", fmtPtr(vdb.Scheduler), vdb.Schedulers, vdb.BioBased())
	}

	// Its device link dangles: the name still says virtio, the driver is
	// unknown, and the missing iosched/ directory is no error.
	vde, _ := fs.Device("vde")
	if vde.Class != ClassVirtio || vde.Driver != "" || len(vde.IOSched) != 0 {
		t.Errorf("vde class %s driver %q iosched %v", vde.Class, vde.Driver, vde.IOSched)
	}

	// Older kernels show a bare "none" on a bio-based queue: bio-based,
	// no scheduler to set, not a scheduler "none".
	ram, _ := fs.Device("ram0")
	if ram.Scheduler != nil || len(ram.Schedulers) != 0 || fmtPtr(ram.HWQueues) != 0 || !ram.BioBased() {
		t.Errorf("ram0 Scheduler %v Schedulers %q HWQueues %v BioBased %q", fmtPtr(ram.Scheduler), ram.Schedulers, fmtPtr(ram.HWQueues), ram.BioBasedBy)
	}
}

// TestClassOnlyTree reads a tree with class/block but no block/ directory.
func TestClassOnlyTree(t *testing.T) {
	t.Parallel()
	fs := newFS(t, classOnlyTree)
	if _, err := os.Lstat(filepath.Join(classOnlyTree, "block")); !os.IsNotExist(err) {
		t.Fatalf("fixture has a block/ directory: %v", err)
	}
	names, err := fs.Disks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"loop0", "vda"}) {
		t.Fatalf("Disks() = %q, want loop0 vda (not the partition vda1)", names)
	}
	d, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	if d.Class != ClassVirtio || d.Driver != "virtio_blk" || fmtPtr(d.Scheduler) != "mq-deadline" || len(d.Errors) != 0 {
		t.Errorf("vda = %+v", d)
	}
	if _, err := fs.Device("vda1"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Device(vda1) = %v, want ErrNoDevice", err)
	}
	if p, err := fs.QueueAttrPath("vda", "scheduler"); err != nil || !strings.Contains(p, "class/block/vda") {
		t.Errorf("QueueAttrPath = %q, %v; want it through class/block", p, err)
	}
	if got, err := fs.ReadQueueAttr("vda", "scheduler"); err != nil || got != "mq-deadline" {
		t.Errorf("ReadQueueAttr(vda, scheduler) = %q, %v", got, err)
	}
}

// TestNoBlockTree: a root that is no sysfs at all is an error, not a panic or
// an empty list.
func TestNoBlockTree(t *testing.T) {
	t.Parallel()
	fs := newFS(t, t.TempDir())
	if names, err := fs.Disks(); err == nil {
		t.Fatalf("Disks() on an empty tree = %q, nil; want an error", names)
	}
	if _, err := fs.Device("vda"); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Device(vda) on an empty tree = %v, want ErrNoDevice", err)
	}
	if _, err := NewFS(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("NewFS of a missing directory succeeded")
	}
}

// copyTree copies a fixture tree so a test can change it.
func copyTree(t *testing.T, src string) string { return treetest.Copy(t, src) }

// TestDeviceRemovedAfterListing: a disk listed by Disks and gone before
// Device reads it is ErrNoDevice, whichever link goes first.
func TestDeviceRemovedAfterListing(t *testing.T) {
	t.Parallel()
	root := copyTree(t, cloudTree)
	fs := newFS(t, root)
	names, err := fs.Disks()
	if err != nil || !slices.Contains(names, "loop0") || !slices.Contains(names, "vdb") {
		t.Fatalf("Disks() = %q, %v", names, err)
	}
	// The kernel removes the device directory; the links dangle.
	if err := os.RemoveAll(filepath.Join(root, "devices/virtual/block/loop0")); err != nil {
		t.Fatal(err)
	}
	// And for vdb the block/ link is gone too, class/block still dangles.
	if err := os.RemoveAll(filepath.Join(root, "devices/pci0000:00/0000:00:06.0/virtio4/block/vdb")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "block/vdb"))
	for _, n := range []string{"loop0", "vdb"} {
		d, err := fs.Device(n)
		if !errors.Is(err, ErrNoDevice) || !Gone(err) {
			t.Errorf("Device(%s) after removal = %v, %v; want ErrNoDevice", n, d, err)
		}
		if fs.Exists(n) {
			t.Errorf("Exists(%s) after removal", n)
		}
	}
}

// TestDeviceQueueMissing: a disk without queue/ (being added or removed) is
// reported with an error, not as a plausible disk with unknown attributes.
func TestDeviceQueueMissing(t *testing.T) {
	t.Parallel()
	root := copyTree(t, cloudTree)
	if err := os.RemoveAll(filepath.Join(root, "devices/virtual/block/loop0/queue")); err != nil {
		t.Fatal(err)
	}
	d, err := newFS(t, root).Device("loop0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(d.Errors, "queue: no such file or directory") {
		t.Errorf("Errors = %q, want the missing queue/ reported", d.Errors)
	}
}

// TestRootThroughSymlink: Path stays relative to the tree when the root is
// reached through a symlink (or given as a relative path).
func TestRootThroughSymlink(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(cloudTree)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "sys")
	if err := os.Symlink(abs, link); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{link, cloudTree, abs} {
		d, err := newFS(t, root).Device("sda")
		if err != nil {
			t.Fatal(err)
		}
		if d.Path != "devices/pci0000:00/0000:00:03.0/virtio2/host0/target0:0:1/0:0:1:0/block/sda" || d.Transport != "virtio_scsi" {
			t.Errorf("root %s: Path %q Transport %q", root, d.Path, d.Transport)
		}
	}
}

func TestQueueAttrs(t *testing.T) {
	t.Parallel()
	root := copyTree(t, cloudTree)
	fs := newFS(t, root)
	for _, attr := range []string{"scheduler", "nr_requests", "iosched/read_expire", "wbt_lat_usec"} {
		if _, err := fs.QueueAttrPath("vda", attr); err != nil {
			t.Errorf("QueueAttrPath(vda, %s) = %v", attr, err)
		}
	}
	for _, attr := range []string{"rotational", "../dev", "iosched/../../dev", "iosched/", "", "Scheduler", "queue/scheduler"} {
		if p, err := fs.QueueAttrPath("vda", attr); err == nil {
			t.Errorf("QueueAttrPath(vda, %q) = %q, want an error", attr, p)
		}
	}

	if got, err := fs.ReadQueueAttr("vda", "scheduler"); err != nil || got != "mq-deadline" {
		t.Errorf("ReadQueueAttr(vda, scheduler) = %q, %v", got, err)
	}
	if err := fs.WriteQueueAttr("vda", "iosched/read_expire", "250"); err != nil {
		t.Fatal(err)
	}
	if got, err := fs.ReadQueueAttr("vda", "iosched/read_expire"); err != nil || got != "250" {
		t.Errorf("after write: read_expire = %q, %v", got, err)
	}
	if _, err := fs.ReadQueueAttr("vdb", "scheduler"); err != nil {
		t.Error(err)
	}

	// A bio-based disk has no nr_requests: the write fails and creates
	// nothing.
	err := fs.WriteQueueAttr("zram0", "nr_requests", "64")
	var ae *AttrError
	if !errors.As(err, &ae) || !Gone(err) || ae.Device != "zram0" || ae.Attr != "nr_requests" {
		t.Fatalf("write of a hidden attribute = %v, want an ENOENT AttrError", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "devices/virtual/block/zram0/queue/nr_requests")); !os.IsNotExist(err) {
		t.Fatalf("the write created a file: %v", err)
	}
	if err := fs.WriteQueueAttr("vdq", "scheduler", "none"); !Gone(err) {
		t.Fatalf("write to a missing disk = %v, want Gone", err)
	}
}
