package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

const probePolicyText = `
[[rule]]
name = "virtio disks"
[rule.match]
class = ["virtio"]
[rule.set]
scheduler = "mq-deadline"
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
`

func candidate(name string, iops, p99 float64) probe.Candidate {
	f := probe.Figures{IOPS: iops, QD1P99: p99}
	return probe.Candidate{Scheduler: name, Figures: f, Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f}}}
}

// rememberVDA writes a result for the cloud tree's vda into stateDir's
// probes.json: none wins by 29%.
func rememberVDA(t *testing.T, stateDir string) {
	t.Helper()
	fs, err := sysfs.NewFS("testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	vda, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	o := probe.DefaultOptions()
	figs := []probe.Candidate{candidate("mq-deadline", 111e3, 50), candidate("none", 143e3, 51)}
	rec := probe.Record{
		Key: probe.KeyOf(fs, vda), Device: "vda", At: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Method:  probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
		Rounds:  1,
		Figures: figs, Decision: probe.Decide(o.Choose, o.Margin, "mq-deadline", figs),
	}
	if err := probe.OpenStore(stateDir, nil).Remember(rec); err != nil {
		t.Fatal(err)
	}
}

// TestProbeShown: without a remembered result plan shows vda's probe as
// pending with the rule's scheduler as the interim value; with one, plan
// and explain show the decision and list and explain the remembered
// figures. A disk no probing rule matches shows nothing.
func TestProbeShown(t *testing.T) {
	inRepoRoot(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte(probePolicyText), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	args := func(a ...string) []string {
		return append([]string{"--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--policy", pol}, a...)
	}

	out, errb, code := runMain(t, args("plan", "--state-dir", state, "vda", "sda")...)
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errb)
	}
	if want := `  scheduler: probe pending (rule "virtio disks"); interim mq-deadline`; !strings.Contains(string(out), want+"\n") {
		t.Errorf("plan without a result: want %q in\n%s", want, out)
	}
	if strings.Count(string(out), "probe") != 1 {
		t.Errorf("plan: a probe shown for a disk no probing rule matches:\n%s", out)
	}

	rememberVDA(t, state)
	out, errb, code = runMain(t, args("plan", "--state-dir", state, "vda")...)
	if code != 0 {
		t.Fatalf("plan: exit %d: %s", code, errb)
	}
	if want := `  scheduler: probe decided none (rule "virtio disks"; probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%; remembered 2026-11-30T12:00:00Z)`; !strings.Contains(string(out), want+"\n") {
		t.Errorf("plan with a result: want %q in\n%s", want, out)
	}
	// The change planned is the decision, as the daemon would make it, not
	// the rule's interim scheduler (plan and apply used to undo the probe).
	if want := `  scheduler: mq-deadline -> none (rule "virtio disks (probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%)")`; !strings.Contains(string(out), want+"\n") {
		t.Errorf("plan with a result: want the change %q in\n%s", want, out)
	}

	out, errb, code = runMain(t, args("explain", "--state-dir", state, "vda")...)
	if code != 0 {
		t.Fatalf("explain: exit %d: %s", code, errb)
	}
	for _, want := range []string{"\nprobe:\n  scheduler: probe decided none", "  remembered: none (probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%; remembered 2026-11-30T12:00:00Z)\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("explain: want %q in\n%s", want, out)
		}
	}

	out, errb, code = runMain(t, args("list", "--state-dir", state)...)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errb)
	}
	if want := "\n  vda: none (probe: none 143K IOPS"; !strings.Contains(string(out), want) || !strings.Contains(string(out), "probe results ("+state) {
		t.Errorf("list: want %q in\n%s", want, out)
	}
	out, _, _ = runMain(t, args("list", "--json", "--state-dir", state)...)
	var listed struct {
		Probes map[string]probe.Record `json:"probes"`
	}
	if err := json.Unmarshal(out, &listed); err != nil || len(listed.Probes) != 1 || listed.Probes["vda"].Winner != "none" || listed.Probes["vda"].Key.Class != "virtio" {
		t.Errorf("list --json lacks vda's probe result (%v):\n%s", err, out)
	}
	// Without a state directory, list is as before.
	out, _, _ = runMain(t, args("list", "--state-dir", filepath.Join(dir, "none"))...)
	if strings.Contains(string(out), "probe") {
		t.Errorf("list without results shows some:\n%s", out)
	}
}
