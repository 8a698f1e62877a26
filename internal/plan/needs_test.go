package plan

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

// A disk read with only the facts a policy needs (as the daemon reads the
// disks it handles) must be evaluated and planned exactly as a disk read
// whole: for every fixture disk and every policy the project ships.
func TestPlanOnNeededFactsEqualsFullRead(t *testing.T) {
	t.Parallel()
	var files []string
	for _, pattern := range []string{"../policy/default.toml", "../../contrib/policies/*.toml", "../../testdata/policies/*.toml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Parse(policy.File{Name: f, Data: data})
		if err != nil {
			continue // testdata/policies/broken.toml
		}
		needs := pol.Needs()
		for _, tree := range []string{"../../testdata/sysfs/cloud", "../../testdata/sysfs/broken"} {
			fs, err := sysfs.NewFS(tree)
			if err != nil {
				t.Fatal(err)
			}
			names, err := fs.Disks()
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				full, err := fs.Device(name)
				if err != nil {
					continue
				}
				part, err := fs.DeviceFacts(name, needs)
				if err != nil {
					t.Fatalf("%s %s: %v", f, name, err)
				}
				evFull, evPart := pol.Evaluate(full), pol.Evaluate(part)
				if !reflect.DeepEqual(evFull.Matched, evPart.Matched) || !reflect.DeepEqual(evFull.Settings, evPart.Settings) {
					t.Errorf("%s on %s/%s: matched %q with every fact, %q with the needed ones", filepath.Base(f), filepath.Base(tree), name, evFull.Matched, evPart.Matched)
					continue
				}
				pFull, pPart := For(full, evFull), For(part, evPart)
				if !reflect.DeepEqual(pFull.Changes, pPart.Changes) || !reflect.DeepEqual(pFull.Skipped, pPart.Skipped) || !reflect.DeepEqual(pFull.Errors, pPart.Errors) {
					t.Errorf("%s on %s/%s: plans differ:\n full %+v\n part %+v", filepath.Base(f), filepath.Base(tree), name, pFull, pPart)
				}
			}
		}
	}
}

func TestNeedsNamesWhatRulesTestAndSet(t *testing.T) {
	t.Parallel()
	pol, err := policy.Parse(policy.File{Name: "p.toml", Data: []byte(`
[[rule]]
name = "a"
[rule.match]
rotational = true
[rule.except]
model = "^QEMU"
[rule.set]
nr_requests = 64
[rule.set.iosched]
fifo_batch = 8
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := sysfs.FactRotational | sysfs.FactIdentity | sysfs.Attr("nr_requests").Facts() | sysfs.FactIOSched
	if got := pol.Needs(); got != want {
		t.Errorf("Needs() = %b, want %b", got, want)
	}
	if pol.UsesNoWait() {
		t.Error("UsesNoWait() true for a policy that does not test nowait")
	}
}
