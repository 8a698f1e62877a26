package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/iosched/iosched/"

// layers lists iosched's production packages bottom up, in the order data
// flows: files and processes, the disks, events, measurements, the policy
// and what it decides, the writes, the records, and the programs that run
// it all. A package may import only packages listed before it. A new
// package gets its place here (the test fails until it has one).
var layers = []string{
	// Where files are, files, processes, goroutines, logs: no knowledge of
	// disks.
	"internal/paths",
	"internal/fileio",
	"internal/procs",
	"internal/tasks",
	"internal/journallog",
	// The disks: the kernel's view, device nodes, locks, original values.
	"internal/sysfs",
	"internal/disklock",
	"internal/devnode",
	"internal/originals",
	// Events.
	"internal/uevent",
	// Measurements: what a disk does, knowing nothing of the policy.
	"internal/observe",
	"internal/probe/probeopt",
	"internal/probe",
	"internal/adapt/adaptopt",
	"internal/adapt",
	// The policy and what it decides.
	"internal/policy",
	"internal/policywatch",
	"internal/plan",
	"internal/conflicts",
	// The writes.
	"internal/apply",
	"internal/restore",
	"internal/pipeline",
	// The records: the state file, metrics.
	"internal/statefile",
	"internal/metrics",
	// The fleet's view of the records, read back from Prometheus.
	"internal/fleet",
	// The programs.
	"internal/daemon",
	"internal/cli",
	"internal/fleetcli",
	"internal/mangen",
	"cmd/iosched",
	"cmd/iosched-fleet",
}

// support are the packages tests and contrib tools build on; no
// production package may import one.
var support = []string{
	"internal/applytest",
	"internal/archtest",
	"internal/diskemu",
	"internal/eventually",
	"internal/fleetit",
	"internal/looptest",
	"internal/promtest",
	"internal/treetest",
	"internal/ueventtest",
}

func TestImportsPointDown(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || strings.HasPrefix(pkg, "contrib/") || pkg == "packaging" {
			continue
		}
		if slices.Contains(support, pkg) {
			continue
		}
		at := slices.Index(layers, pkg)
		if at < 0 {
			t.Errorf("%s has no place in layers: add it where its step of the flow is", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if slices.Contains(support, dep) {
				t.Errorf("%s imports %s, a package for tests", pkg, dep)
				continue
			}
			if i := slices.Index(layers, dep); i >= at {
				t.Errorf("%s imports %s, which is above it in the layers", pkg, dep)
			}
		}
	}
}
