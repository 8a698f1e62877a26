package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/promtest"
	"github.com/iosched/iosched/internal/sysfs"
)

// oneLoopTree is a fake sysfs tree with loop0, a loop disk offering none
// and mq-deadline.
func oneLoopTree(t *testing.T) sysfs.FS {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "devices", "virtual", "block", "loop0")
	for rel, text := range map[string]string{
		"dev": "7:0\n", "size": "2097152\n", "queue/scheduler": "[none] mq-deadline\n",
		"queue/nr_requests": "128\n", "queue/rotational": "0\n", "mq/0/nr_tags": "128\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../devices/virtual/block/loop0", filepath.Join(root, "block", "loop0")); err != nil {
		t.Fatal(err)
	}
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// The exported seed file passes the seed checks, and a disk of the key
// looked up through the pipeline under a policy that seeds from it gets
// the fleet's median curves.
func TestExportSeedsLookup(t *testing.T) {
	t.Parallel()
	fs := oneLoopTree(t)
	dev, err := fs.Device("loop0")
	if err != nil {
		t.Fatal(err)
	}
	key := probe.KeyOf(fs, dev).String()
	disk := func(none, mq [4]float64) promtest.Disk {
		return promtest.Disk{Name: "loop0", Key: key, Source: "probed", Busy: map[int]float64{0: 0.5}, Curves: curve(none, mq)}
	}
	fleet := []promtest.Machine{
		{Instance: "a:9100", Disks: []promtest.Disk{disk([4]float64{100, 300, 800, 900}, [4]float64{90, 280, 700, 800})}},
		{Instance: "b:9100", Disks: []promtest.Disk{disk([4]float64{120, 320, 820, 950}, [4]float64{95, 290, 710, 820})}},
		{Instance: "c:9100", Disks: []promtest.Disk{disk([4]float64{110, 310, 900, 1000}, [4]float64{80, 300, 720, 790})}},
	}
	at := time.Now().Truncate(time.Minute).Add(-time.Hour)
	srv := promtest.StartServer(t, promtest.ServerOptions{OpenMetrics: promtest.OpenMetrics(fleet, at, 2*time.Hour, time.Minute)})
	rep, err := Query(context.Background(), srv.API, Options{Range: time.Hour, At: at, MinMachines: 1})
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(t.TempDir(), "fleet.json")
	n, err := ExportSeeds(seed, rep, SeedOptions{Engine: "psync", MinMachines: 3, At: at})
	if err != nil || n != 1 {
		t.Fatalf("ExportSeeds: %d results, %v; want 1", n, err)
	}
	pol, err := policy.Parse(policy.File{Name: "test.toml", Data: []byte(fmt.Sprintf(`
[[rule]]
name = "loop disks"
[rule.match]
class = "loop"
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
[daemon]
probe_results = [%q]
`, seed))})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipeline.SeedsOf(pol).Err(); err != nil {
		t.Fatalf("the exported file fails the seed checks: %v", err)
	}
	p := &pipeline.Pipeline{FS: fs, StateDir: t.TempDir()}
	dec, err := p.LookUpProbe(pol, dev, nil)
	if err != nil || dec.Report == nil {
		t.Fatalf("lookup of loop0: %+v, %v; want the fleet's result", dec, err)
	}
	want := map[string][]float64{"none": {110, 310, 820, 950}, "mq-deadline": {90, 290, 710, 800}}
	for _, c := range dec.Report.Candidates {
		w := want[c.Scheduler]
		if len(c.Curve) != len(w) {
			t.Fatalf("%s: curve %+v, want IOPS %v", c.Scheduler, c.Curve, w)
		}
		for i, pt := range c.Curve {
			if pt.Depth != []int{1, 4, 16, 64}[i] || pt.IOPS != w[i] {
				t.Errorf("%s: point %d is %+v, want depth %d, %g IOPS", c.Scheduler, i, pt, []int{1, 4, 16, 64}[i], w[i])
			}
		}
	}
	if len(dec.Report.Candidates) != 2 {
		t.Errorf("candidates %+v, want none and mq-deadline", dec.Report.Candidates)
	}
	// Fewer machines than asked: nothing exported.
	if n, err := ExportSeeds(seed, rep, SeedOptions{Engine: "psync", MinMachines: 4, At: at}); err != nil || n != 0 {
		t.Errorf("ExportSeeds with 4 machines needed: %d results, %v; want 0", n, err)
	}
}
