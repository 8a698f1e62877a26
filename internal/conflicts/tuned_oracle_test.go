package conflicts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
)

// oracleDisk is a fake disk both iosched and tuned's code are shown: the
// snapshot iosched reads, and what tuned's disk plug-in and sysfs glob see.
type oracleDisk struct {
	dev    *sysfs.Device
	parent string // the parent device's subsystem, "" for none
	attrs  []string
}

func oracleDisks() []oracleDisk {
	disk := func(name string, class sysfs.Class, path, dev, parent string, removable bool, attrs ...string) oracleDisk {
		d := &sysfs.Device{Name: name, Class: class, Path: path, MajorMinor: dev, Removable: ptr(removable),
			Rotational: ptr(false), Scheduler: ptr("none"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"},
			Tunables: map[string]string{}}
		attrs = append([]string{"scheduler", "read_ahead_kb", "nr_requests", "rq_affinity"}, attrs...)
		for _, a := range attrs {
			if a != "scheduler" {
				d.Tunables[a] = "0"
			}
		}
		return oracleDisk{d, parent, attrs}
	}
	return []oracleDisk{
		disk("vda", sysfs.ClassVirtio, "devices/pci0000:00/0000:00:04.0/virtio1/block/vda", "252:0", "virtio", false, "iosched/fifo_batch"),
		disk("sda", sysfs.ClassSCSI, "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda", "8:0", "scsi", false),
		disk("sdb", sysfs.ClassSCSI, "devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdb", "8:16", "scsi", false, "iosched/fifo_batch"),
		disk("sdc", sysfs.ClassSCSI, "devices/pci0000:00/0000:00:14.0/usb2/2-4/2-4:1.0/host7/target7:0:0/7:0:0:0/block/sdc", "8:32", "scsi", true),
		disk("nvme0n1", sysfs.ClassNVMe, "devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1", "259:0", "nvme", false),
		disk("loop0", sysfs.ClassLoop, "devices/virtual/block/loop0", "7:0", "", false),
		disk("mmcblk0", sysfs.ClassMMC, "devices/platform/soc/mmc0/mmc0:0001/block/mmcblk0", "179:0", "mmc", false),
	}
}

// oracleWrite is a write as the oracle prints it, and as the test reduces
// iosched's Write to.
type oracleWrite struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Attr  string `json:"attr"`
	Value string `json:"value"`
	Cmp   string `json:"cmp"`
}

// runTunedOracle runs testdata/tuned-oracle.py (tuned 2.20's own code) on
// root, as on a virtual machine or not.
func runTunedOracle(t *testing.T, root string, vm bool, disks []oracleDisk) (profile, problem string, writes map[string][]oracleWrite) {
	t.Helper()
	type reqDisk struct {
		Name      string   `json:"name"`
		Path      string   `json:"path"`
		Dev       string   `json:"dev"`
		Parent    *string  `json:"parent"`
		Removable string   `json:"removable"`
		Attrs     []string `json:"attrs"`
	}
	req := struct {
		Root  string    `json:"root"`
		VM    bool      `json:"vm"`
		Disks []reqDisk `json:"disks"`
	}{Root: root, VM: vm}
	for _, d := range disks {
		rd := reqDisk{Name: d.dev.Name, Path: d.dev.Path, Dev: d.dev.MajorMinor, Removable: "0", Attrs: d.attrs}
		if *d.dev.Removable {
			rd.Removable = "1"
		}
		if d.parent != "" {
			rd.Parent = &d.parent
		}
		req.Disks = append(req.Disks, rd)
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tunedPython, "testdata/tuned-oracle.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tuned-oracle.py on %s: %v\n%s", root, err, stderr.String())
	}
	var res struct {
		Profile string                   `json:"profile"`
		Error   string                   `json:"error"`
		Writes  map[string][]oracleWrite `json:"writes"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tuned-oracle.py on %s: %v\n%s", root, err, out)
	}
	return res.Profile, res.Error, res.Writes
}

// tunedPython is Debian's interpreter, the one tuned's modules are
// installed for (a python3 earlier in PATH may not see them).
const tunedPython = "/usr/bin/python3"

// requireTuned fails, or skips where the integration tests may skip, when
// tuned's Python modules are not installed (.ci/run installs them).
func requireTuned(t *testing.T) {
	t.Helper()
	if err := exec.Command(tunedPython, "-c", "import tuned.profiles.loader").Run(); err != nil {
		if os.Getenv("IOSCHED_INTEGRATION") == "required" {
			t.Fatalf("tuned 2.20's Python modules are needed (Debian's tuned package): %v", err)
		}
		t.Skipf("tuned's Python modules are not installed (Debian's tuned package): %v", err)
	}
}

// tunedOracleRoots are the differential test's trees: every profile tuned
// 2.20 ships, each made the active one, and the edge cases of
// testdata/tuned-oracle.
func tunedOracleRoots(t *testing.T) map[string]string {
	t.Helper()
	roots := map[string]string{}
	shipped, err := filepath.Abs("testdata/tuned-shipped")
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := os.ReadDir(filepath.Join(shipped, "usr/lib/tuned"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range profiles {
		root := t.TempDir()
		for _, dir := range []string{"usr/lib", "etc"} {
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(filepath.Join(shipped, "usr/lib/tuned"), filepath.Join(root, "usr/lib/tuned")); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(root, "etc/tuned"), os.DirFS(filepath.Join(shipped, "etc/tuned"))); err != nil {
			t.Fatal(err)
		}
		writeFile(t, root, TunedActiveProfile, p.Name()+"\n")
		roots["shipped/"+p.Name()] = root
	}
	edges, err := os.ReadDir("testdata/tuned-oracle")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		root, err := filepath.Abs(filepath.Join("testdata/tuned-oracle", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		roots[e.Name()] = root
	}
	return roots
}

// TestTunedAgainstTunedItself is the differential test: for every tree,
// on a virtual machine and not, for every fake disk, the writes iosched
// names (file:line, attribute, value, comparison, in tuned's order) are
// those tuned 2.20's own loader, merger, variable expansion, unit manager
// and plug-ins make. A write iosched names only on a virtual machine
// carries the ${f:virt_check} condition, and only those carry one: every
// other fact is known here.
func TestTunedAgainstTunedItself(t *testing.T) {
	t.Parallel()
	requireTuned(t)
	disks := oracleDisks()
	for name, root := range tunedOracleRoots(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := Load(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, vm := range []bool{false, true} {
				profile, problem, want := runTunedOracle(t, root, vm, disks)
				if problem != "" {
					if s.tuned != nil {
						t.Errorf("vm=%v: tuned applies no profile (%s); iosched read one", vm, problem)
					}
					continue
				}
				for _, d := range disks {
					var got []oracleWrite
					for _, w := range s.ForKnown(d.dev, oracleKnown(d)) {
						if w.Kind != TunedProfile {
							continue
						}
						if w.Profile != profile {
							t.Errorf("%s: profile %q, tuned names it %q", w.Where(), w.Profile, profile)
						}
						virt := ""
						for _, u := range w.Unknown {
							if strings.Contains(u, "${f:virt_check") {
								virt = u
								continue
							}
							if strings.HasPrefix(u, "tuned would evaluate ${f:") {
								continue // a value shown as written, as the oracle's tuned leaves it
							}
							t.Errorf("%s on %s: condition %q, though every fact is known", w.Where(), d.dev.Name, u)
						}
						if virt != "" && strings.Contains(virt, "is not a virtual") == vm {
							continue // the other branch's
						}
						cmp := ""
						if w.Compare != 0 {
							cmp = string(w.Compare)
						}
						got = append(got, oracleWrite{w.File, w.Line, w.Attribute, w.Value, cmp})
					}
					// One wildcard line writes several files in the
					// order the directory lists them, which is the
					// filesystem's: each file once, so that order
					// decides nothing.
					sortRuns(got)
					sortRuns(want[d.dev.Name])
					if !reflect.DeepEqual(got, want[d.dev.Name]) && (len(got) > 0 || len(want[d.dev.Name]) > 0) {
						t.Errorf("vm=%v, disk %s:\n iosched %v\n   tuned %v", vm, d.dev.Name, got, want[d.dev.Name])
					}
				}
			}
		})
	}
}

// oracleKnown reads the fake disk's files: the ones the oracle's tree
// has, removable, and nothing else.
func oracleKnown(d oracleDisk) Known {
	return Known{Attr: func(rel string) (string, bool, error) {
		if rel == "removable" {
			if *d.dev.Removable {
				return "1", true, nil
			}
			return "0", true, nil
		}
		if a, ok := strings.CutPrefix(rel, "queue/"); ok && slices.Contains(d.attrs, a) {
			return "0", true, nil
		}
		if rel == "bdi/read_ahead_kb" {
			return "0", true, nil
		}
		return "", false, nil
	}}
}

// sortRuns sorts each run of writes from one file and line by attribute.
func sortRuns(ws []oracleWrite) {
	for i := 0; i < len(ws); {
		j := i + 1
		for j < len(ws) && ws[j].File == ws[i].File && ws[j].Line == ws[i].Line {
			j++
		}
		slices.SortStableFunc(ws[i:j], func(a, b oracleWrite) int { return strings.Compare(a.Attr, b.Attr) })
		i = j
	}
}
