package apply

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/internal/plan"
)

// A disk's queue seen as QueueAttrs (to be wrapped, by a recorder) answers
// for that disk only: a write named for another disk reaches nothing.
func TestAttrsOfOneDisk(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{
		"vda": {"nr_requests": "256"},
		"vdb": {"nr_requests": "256"},
	})
	if err := os.WriteFile(filepath.Join(fs.Root(), "block", "vda", "dev"), []byte("252:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	disk, err := fs.OpenDisk("vda")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	attrs := AttrsOf(disk, "vda")
	if err := attrs.WriteQueueAttr("vdb", "nr_requests", "64"); err == nil {
		t.Error("a write named for vdb through vda's queue was accepted")
	}
	if got, _ := fs.ReadQueueAttr("vdb", "nr_requests"); got != "256" {
		t.Errorf("vdb nr_requests = %s after a write refused, want 256", got)
	}
	if attrs.Exists("vdb") || !attrs.Exists("vda") {
		t.Error("Exists: want true for vda only")
	}
	r := (&Applier{}).ApplyTo(t.Context(), QueueOf(attrs, "vda"), plan.Plan{Name: "vda", Changes: []plan.Change{{Attribute: "nr_requests", From: "256", To: "64"}}})
	if r.Failed() {
		t.Fatalf("apply through vda's queue: %+v", r.Outcomes)
	}
	if got, _ := fs.ReadQueueAttr("vda", "nr_requests"); got != "64" {
		t.Errorf("vda nr_requests = %s, want 64", got)
	}
}
