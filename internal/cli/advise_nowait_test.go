package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/treetest"
)

// fakeNoWait answers every disk's NOWAIT test with answer, or leaves it
// unknown with reason.
type fakeNoWait struct {
	answer *bool
	reason string
}

func (f fakeNoWait) Fill(d *sysfs.Device) { d.NoWait, d.NoWaitReason = f.answer, f.reason }

// TestAdviseNoWait: a disk without NOWAIT support is said plainly, with
// what io_uring does on it, in the text and the JSON; a capable disk gets
// no line; an untested one says why in the JSON only; a disk that cannot
// be read says why it was not tested.
func TestAdviseNoWait(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS(treetest.Copy(t, "../../testdata/sysfs/cloud"))
	if err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	rows := []adviceRow{{Name: "vda", Basis: "idle: no basis"}, {Name: "nvme0n1", Basis: "idle: no basis"}, {Name: "sda", Basis: "idle: no basis"}, {Name: "gone"}}
	rows[0].testNoWait(fs, fakeNoWait{answer: &no})
	rows[1].testNoWait(fs, fakeNoWait{answer: &yes})
	rows[2].testNoWait(fs, fakeNoWait{reason: "open /dev/sda: permission denied"})
	rows[3].testNoWait(fs, fakeNoWait{answer: &no})
	if rows[0].NoWait == nil || *rows[0].NoWait || rows[0].NoWaitNote != noWaitSlowPath {
		t.Errorf("without NOWAIT: %v %q", rows[0].NoWait, rows[0].NoWaitNote)
	}
	if rows[1].NoWait == nil || !*rows[1].NoWait || rows[1].NoWaitNote != "" {
		t.Errorf("with NOWAIT: %v %q", rows[1].NoWait, rows[1].NoWaitNote)
	}
	if rows[2].NoWait != nil || rows[2].NoWaitNote != "NOWAIT not tested: open /dev/sda: permission denied" {
		t.Errorf("untested: %v %q", rows[2].NoWait, rows[2].NoWaitNote)
	}
	if rows[3].NoWait != nil || !strings.HasPrefix(rows[3].NoWaitNote, "NOWAIT not tested: ") || !strings.Contains(rows[3].NoWaitNote, "gone") {
		t.Errorf("a disk that is not there: %v %q", rows[3].NoWait, rows[3].NoWaitNote)
	}
	var out bytes.Buffer
	renderAdvice(&out, time.Second, rows[:3])
	if want := "\nvda: " + noWaitSlowPath + "\n"; !strings.Contains(out.String(), want) {
		t.Errorf("the text does not say %q:\n%s", want, out.String())
	}
	if strings.Count(out.String(), ": no NOWAIT support") != 1 {
		t.Errorf("NOWAIT said of a disk other than vda:\n%s", out.String())
	}
}

// TestAdviseNoWaitFakeTree: on a sysfs tree that is not this machine's,
// advise opens no node and says how to have NOWAIT tested.
func TestAdviseNoWaitFakeTree(t *testing.T) {
	t.Parallel()
	root := treetest.Copy(t, "../../testdata/sysfs/cloud")
	if err := os.WriteFile(filepath.Join(root, "block", "vda", "stat"), []byte("100 0 800 50 0 0 0 0 0 40 50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, code := runMain(t, "--sysfs", root, "advise", "--interval", "10ms", "--json", "--state-dir", t.TempDir(), "vda")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errb)
	}
	if !bytes.Contains(out, []byte(`"nowait": null`)) || !bytes.Contains(out, []byte(`pass --dev DIR to test them`)) {
		t.Errorf("advise on a fake tree:\n%s", out)
	}
}
