package applytest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// tree is a sysfs tree whose disk vda has the given queue files.
func tree(t *testing.T, files map[string]string) sysfs.FS {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, "block", "vda", "queue", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestRecordsWhatAnApplierWrites(t *testing.T) {
	t.Parallel()
	fs := tree(t, map[string]string{"scheduler": "[none] mq-deadline", "nr_requests": "128", "read_ahead_kb": "128"})
	var rec Recorder
	a := apply.Applier{FS: rec.Wrap(fs)}
	r := a.Apply(context.Background(), plan.Plan{Name: "vda", Changes: []plan.Change{
		{Attribute: "scheduler", From: "none", To: "mq-deadline", Rule: "r"},
		{Attribute: "nr_requests", To: "64", Rule: "r", After: "scheduler"},
		{Attribute: "read_ahead_kb", From: "128", To: "128", Rule: "r"}, // in place: no write
	}})
	if r.Failed() {
		t.Fatalf("apply failed: %+v", r.Outcomes)
	}
	want := []Write{W("vda", "scheduler", "mq-deadline"), W("vda", "nr_requests", "64")}
	if d := Diff(rec.Writes(), want); d != "" {
		t.Error(d)
	}
	if got, _ := fs.ReadQueueAttr("vda", "nr_requests"); got != "64" {
		t.Errorf("nr_requests %q after the recorded write: the recorder must pass writes on", got)
	}
	mark := rec.Len()
	if d := Diff(rec.Since(mark), nil); d != "" {
		t.Errorf("since the mark: %s", d)
	}
	if got := rec.Of("vda", "nr_requests"); len(got) != 1 {
		t.Errorf("Of(vda, nr_requests) = %v", got)
	}
	if got := rec.Of("vdb", ""); len(got) != 0 {
		t.Errorf("Of(vdb) = %v", got)
	}
}

func TestRecordsAFailedWriteWithItsError(t *testing.T) {
	t.Parallel()
	fs := tree(t, map[string]string{"scheduler": "[none] mq-deadline"})
	var rec Recorder
	attrs := rec.Wrap(fs)
	if err := attrs.WriteQueueAttr("vda", "nr_requests", "64"); err == nil {
		t.Fatal("a write to an attribute the disk does not have succeeded")
	}
	got := rec.Writes()
	if len(got) != 1 || got[0].Disk != "vda" || got[0].Attr != "nr_requests" || got[0].Value != "64" || got[0].Err == "" {
		t.Fatalf("recorded %v, want the failed write with its error", got)
	}
	if d := Diff(got, []Write{W("vda", "nr_requests", "64")}); !strings.Contains(d, "- vda nr_requests=\"64\"") || !strings.Contains(d, "+ vda nr_requests=\"64\" error: ") {
		t.Errorf("the diff does not show the failure:\n%s", d)
	}
}

func TestDiffMarksWhereSequencesDiffer(t *testing.T) {
	t.Parallel()
	a, b, c := W("vda", "scheduler", "none"), W("vda", "nr_requests", "64"), W("vdb", "scheduler", "bfq")
	if d := Diff([]Write{a, b}, []Write{a, b}); d != "" {
		t.Errorf("equal sequences: %q", d)
	}
	d := Diff([]Write{a, c}, []Write{a, b})
	for _, line := range []string{"   " + a.String(), " - " + b.String(), " + " + c.String()} {
		if !strings.Contains(d, line+"\n") {
			t.Errorf("diff lacks %q:\n%s", line, d)
		}
	}
	if d := Diff([]Write{b, a}, []Write{a, b}); d == "" {
		t.Error("the same writes in another order are no difference")
	}
	if d := Diff(nil, []Write{a}); !strings.Contains(d, " - "+a.String()) {
		t.Errorf("a missing write is not shown:\n%s", d)
	}
}
