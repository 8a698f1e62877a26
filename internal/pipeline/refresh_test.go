package pipeline

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/treetest"
)

const refreshPolicy = `
[[rule]]
name = "virtio disks"
[rule.match]
class = ["virtio"]
[rule.set]
scheduler = "none"
nr_requests = 64
read_ahead_kb = 256
`

// Refresh re-reads what the policy sets from the tree, and only that: a
// value changed behind the reader's back is seen, an attribute gone from a
// disk still there is dropped, and a disk gone is reported gone.
func TestRefresh(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, cloudTree)
	p := newPipeline(t, tree)
	pol := parse(t, refreshPolicy)
	dev, err := p.Read(openDisk(t, p, "vda"), ScopeFor(pol), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := p.EvaluatePolicy(pol, dev)
	queue := filepath.Join(tree, filepath.FromSlash(dev.Path), "queue")
	write := func(attr, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(queue, attr), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("scheduler", "[none] mq-deadline kyber\n")
	write("nr_requests", "17\n")
	if err := os.Remove(filepath.Join(queue, "read_ahead_kb")); err != nil {
		t.Fatal(err)
	}
	vda, err := sysfs.ParseName("vda")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(p.Queue(vda), dev, ev, false); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	for attr, want := range map[string]string{"scheduler": "none", "nr_requests": "17", "read_ahead_kb": ""} {
		if got, _ := dev.Value(sysfs.Attr(attr)); got != want {
			t.Errorf("after Refresh, %s = %q, want %q", attr, got, want)
		}
	}
	if len(dev.Schedulers) != 3 {
		t.Errorf("schedulers offered after Refresh: %v, want the three the file lists", dev.Schedulers)
	}
	if p.Gone(vda) {
		t.Fatal("Gone(vda) while it is there")
	}
	if err := os.Remove(filepath.Join(tree, "block", "vda")); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(p.Queue(vda), dev, ev, false); !sysfs.Gone(err) {
		t.Errorf("Refresh of a removed disk: %v, want it gone", err)
	}
	if !p.Gone(vda) {
		t.Error("Gone(vda) false once its block/ link is removed")
	}
}

// LookUpProbe reads the disk whole through the directory its caller holds
// open: that disk's decision is found though its name no longer leads to
// it (its block/ links gone, as when the disk is being removed), where a
// lookup by name finds no disk.
func TestLookUpProbeThroughTheOpenDisk(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, cloudTree)
	p := newPipeline(t, tree)
	rememberVDA(t, p.FS, p.StateDir, time.Now().Add(-time.Hour))
	pol := parse(t, probingPolicy)
	disk := openDisk(t, p, "vda")
	dev, err := p.Read(disk, ScopeFor(pol), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"block/vda", "class/block/vda"} {
		if err := os.Remove(filepath.Join(tree, link)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	dec, err := p.LookUpProbe(pol, dev, disk)
	if err != nil || dec.Report == nil || dec.Report.Winner != "none" {
		t.Errorf("lookup through the open disk: %+v, %v; want the remembered decision for none", dec.Report, err)
	}
	if _, err := p.LookUpProbe(pol, dev, nil); !sysfs.Gone(err) {
		t.Errorf("lookup by name with the name gone: %v, want no such disk", err)
	}
}
