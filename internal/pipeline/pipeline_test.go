package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/treetest"
)

// The fake trees are described in testdata/sysfs/README.md.
const cloudTree = "../../testdata/sysfs/cloud"

func parse(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(policy.File{Name: "test.toml", Data: []byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newPipeline(t *testing.T, root string) *Pipeline {
	t.Helper()
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return &Pipeline{FS: fs, Nodes: &nodesSeen{}, StateDir: t.TempDir()}
}

// nodesSeen stands for the disks' nodes: a fake tree has none. It answers
// every NOWAIT test as untestable, with a reason naming the test it was.
type nodesSeen struct {
	mu    sync.Mutex
	tests int
}

func (n *nodesSeen) Fill(dev *sysfs.Device) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tests++
	dev.NoWait, dev.NoWaitReason = nil, fmt.Sprintf("test %d", n.tests)
}

func openDisk(t *testing.T, p *Pipeline, name string) *sysfs.Disk {
	t.Helper()
	disk, err := p.FS.OpenDisk(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	return disk
}

// Read reads what the scope asks and no more: the facts a policy tests,
// and NOWAIT only when a rule tests it; Everything reads the disk whole.
func TestReadScope(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, cloudTree)
	byClass := parse(t, "[[rule]]\nname = \"nvme\"\n[rule.match]\nclass = \"nvme\"\n[rule.set]\nread_ahead_kb = 128\n")
	byNoWait := parse(t, "[[rule]]\nname = \"nowait\"\n[rule.match]\nnowait = true\n[rule.set]\nread_ahead_kb = 128\n")

	dev, err := p.Read(openDisk(t, p, "nvme0n1"), ScopeFor(byClass), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Model != "" || NoWaitTested(dev) {
		t.Errorf("read for a class rule: model %q, NOWAIT tested %v; want neither read", dev.Model, NoWaitTested(dev))
	}
	if _, ok := dev.Value("read_ahead_kb"); !ok {
		t.Errorf("read for a class rule: the read_ahead_kb the rule sets was not read: %v", dev.Tunables)
	}

	dev, err = p.Read(openDisk(t, p, "nvme0n1"), ScopeFor(byNoWait), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dev.NoWaitReason != "test 1" {
		t.Errorf("read for a nowait rule: NOWAIT not tested (reason %q)", dev.NoWaitReason)
	}

	dev, err = p.Read(openDisk(t, p, "nvme0n1"), Everything(), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dev.Model == "" || !NoWaitTested(dev) {
		t.Errorf("read whole: model %q, NOWAIT tested %v; want both", dev.Model, NoWaitTested(dev))
	}
}

// A NOWAIT answer is kept from the previous read of the same disk, not
// tested again; another disk under the name (another device number) is
// tested.
func TestReadKeepsNoWaitOfTheSameDisk(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, cloudTree)
	first, err := p.Read(openDisk(t, p, "vda"), Everything(), sysfs.Ident{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := *first
	yes := true
	same.NoWait, same.NoWaitReason = &yes, ""
	dev, err := p.Read(openDisk(t, p, "vda"), Everything(), sysfs.Ident{}, &same)
	if err != nil {
		t.Fatal(err)
	}
	if dev.NoWait == nil || !*dev.NoWait || dev.NoWaitReason != "" {
		t.Errorf("same disk: NoWait %v (%q), want the previous answer kept", dev.NoWait, dev.NoWaitReason)
	}

	other := same
	other.MajorMinor = "999:0"
	dev, err = p.Read(openDisk(t, p, "vda"), Everything(), sysfs.Ident{}, &other)
	if err != nil {
		t.Fatal(err)
	}
	if dev.NoWait != nil || dev.NoWaitReason != "test 2" {
		t.Errorf("another disk under the name: NoWait %v (%q), want it tested anew", dev.NoWait, dev.NoWaitReason)
	}
}

// A disk without queue/ is being added or removed: gone, not bio-based. A
// bio-based disk (queue/ without a scheduler file) is read as such.
func TestReadWithoutQueueIsGone(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, cloudTree)
	p := newPipeline(t, tree)
	dev, err := p.Read(openDisk(t, p, "ram0"), Everything(), sysfs.Ident{}, nil)
	if err != nil || dev.Scheduler != nil || !dev.BioBased() {
		t.Fatalf("ram0 with queue/: %v, scheduler %v; want it read as bio-based", err, dev.Scheduler)
	}
	if err := os.RemoveAll(filepath.Join(tree, filepath.FromSlash(dev.Path), "queue")); err != nil {
		t.Fatal(err)
	}
	_, err = p.Read(openDisk(t, p, "ram0"), Everything(), sysfs.Ident{}, nil)
	if !sysfs.Gone(err) || !strings.Contains(fmt.Sprint(err), "no queue/ directory") {
		t.Errorf("ram0 without queue/: err %v, want it gone", err)
	}
}

const probingPolicy = `
[[rule]]
name = "virtio disks"
[rule.match]
class = ["virtio"]
[rule.set]
scheduler = "mq-deadline"
nr_requests = 64
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
max_age = "1d"
`

// rememberVDA remembers in stateDir a probe of the cloud tree's vda made at
// at: none beats mq-deadline by 29%.
func rememberVDA(t *testing.T, fs sysfs.FS, stateDir string, at time.Time) {
	t.Helper()
	vda, err := fs.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	o := probe.DefaultOptions()
	cand := func(name string, iops float64) probe.Candidate {
		f := probe.Figures{IOPS: iops, QD1P99: 50}
		return probe.Candidate{Scheduler: name, Figures: f, Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f}}}
	}
	figs := []probe.Candidate{cand("mq-deadline", 111e3), cand("none", 143e3)}
	rec := probe.Record{
		Key: probe.KeyOf(fs, vda), Device: "vda", At: at.UTC(),
		Method:  probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Candidates: []string{"none", "mq-deadline"}},
		Rounds:  1,
		Figures: figs, Decision: probe.Decide(o.Choose, o.Margin, "mq-deadline", figs),
	}
	if err := probe.OpenStore(stateDir, nil).Remember(rec); err != nil {
		t.Fatal(err)
	}
}

func change(p plan.Plan, attr string) *plan.Change {
	for i := range p.Changes {
		if p.Changes[i].Attribute == attr {
			return &p.Changes[i]
		}
	}
	return nil
}

// Assess takes a [rule.probe]'s decision from the results remembered in
// the state directory or seeded by [daemon] probe_results, younger than
// max_age; without one the probe is pending and the rule's own scheduler
// is planned (the interim value). A disk no probing rule matches has no
// decision.
func TestAssessProbeDecision(t *testing.T) {
	t.Parallel()
	seedDir := t.TempDir()
	seeded := filepath.Join(seedDir, "fleet.json")
	for _, tt := range []struct {
		name     string
		setup    func(t *testing.T, p *Pipeline)
		policy   string
		decided  bool
		fromWant string
	}{
		{name: "none remembered", policy: probingPolicy},
		{
			name:   "remembered",
			policy: probingPolicy,
			setup: func(t *testing.T, p *Pipeline) {
				rememberVDA(t, p.FS, p.StateDir, time.Now().Add(-time.Hour))
			},
			decided: true, fromWant: "remembered ",
		},
		{
			name:   "remembered, older than max_age",
			policy: probingPolicy,
			setup: func(t *testing.T, p *Pipeline) {
				rememberVDA(t, p.FS, p.StateDir, time.Now().Add(-48*time.Hour))
			},
		},
		{
			name:   "seeded",
			policy: probingPolicy + fmt.Sprintf("\n[daemon]\nprobe_results = [%q]\n", filepath.Join(seedDir, "*.json")),
			setup: func(t *testing.T, p *Pipeline) {
				fleet := t.TempDir()
				rememberVDA(t, p.FS, fleet, time.Now().Add(-time.Hour))
				if _, err := probe.OpenStore(fleet, nil).Export(seeded); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(seeded) })
			},
			decided: true, fromWant: "seeded from " + seeded,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t, cloudTree)
			if tt.setup != nil {
				tt.setup(t, p)
			}
			pol := parse(t, tt.policy)
			a, probeErr, err := p.Assess(pol, openDisk(t, p, "vda"), ScopeFor(pol))
			if err != nil || probeErr != nil {
				t.Fatalf("assess: %v, probe look-up: %v", err, probeErr)
			}
			if !a.Probe.Probed() || a.Probe.Rule != "virtio disks" {
				t.Fatalf("decision %+v, want vda probed by rule \"virtio disks\"", a.Probe)
			}
			sched := change(a.Plan, "scheduler")
			if !tt.decided {
				// vda runs mq-deadline, the interim value: nothing to switch.
				if !a.Probe.Pending() || sched != nil {
					t.Errorf("pending %v, scheduler change %+v; want the probe pending and the interim mq-deadline kept", a.Probe.Pending(), sched)
				}
				return
			}
			if a.Probe.Pending() || a.Probe.Report.Winner != "none" || !strings.HasPrefix(a.Probe.Report.From, tt.fromWant) {
				t.Fatalf("decision %+v, want none from %q", a.Probe.Report, tt.fromWant)
			}
			wantRule := "virtio disks (" + a.Probe.Report.Provenance + ")"
			if sched == nil || sched.From != "mq-deadline" || sched.To != "none" || sched.Rule != wantRule {
				t.Errorf("scheduler change %+v, want mq-deadline -> none by %q", sched, wantRule)
			}
			if nr := change(a.Plan, "nr_requests"); nr == nil || nr.To != "64" || nr.Rule != "virtio disks" {
				t.Errorf("nr_requests change %+v: the rule's other settings must stand with the decision", nr)
			}
		})
	}

	p := newPipeline(t, cloudTree)
	rememberVDA(t, p.FS, p.StateDir, time.Now())
	pol := parse(t, probingPolicy)
	a, probeErr, err := p.Assess(pol, openDisk(t, p, "sda"), ScopeFor(pol))
	if err != nil || probeErr != nil || a.Probe.Probed() {
		t.Errorf("sda (no probing rule): %v, %v, decision %+v; want none", err, probeErr, a.Probe)
	}
}

// A seeded file that cannot be read is reported, and the assessment
// stands without a decision.
func TestAssessUnreadableSeed(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, cloudTree)
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := parse(t, probingPolicy+fmt.Sprintf("\n[daemon]\nprobe_results = [%q]\n", bad))
	a, probeErr, err := p.Assess(pol, openDisk(t, p, "vda"), ScopeFor(pol))
	if err != nil {
		t.Fatal(err)
	}
	// The seeds' error is the policy's, reported once (SeedsOf), not
	// with each disk's look-up.
	if probeErr != nil {
		t.Errorf("probe look-up error %v, want none: the seeds' error is the policy's", probeErr)
	}
	if err := SeedsOf(pol).Err(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("seeds error %v, want the seeded file's", err)
	}
	if !a.Probe.Pending() {
		t.Errorf("decision %+v, want pending", a.Probe)
	}
}

func queueFile(t *testing.T, p *Pipeline, dev *sysfs.Device, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.FS.Root(), filepath.FromSlash(dev.Path), "queue", attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Write writes the plan under the disk's lock: prepare runs holding it,
// before the first write; the lock is free again once Write returns. A lock
// another holds (a probe measuring the disk) leaves the disk unwritten and
// prepare not run; a dry run takes no lock and writes nothing.
func TestWriteUnderTheDisksLock(t *testing.T) {
	t.Parallel()
	tree := treetest.Copy(t, cloudTree)
	p := newPipeline(t, tree)
	pol := parse(t, "[[rule]]\nname = \"nbd\"\n[rule.match]\nclass = \"nbd\"\n[rule.set]\nnr_requests = 32\n")
	disk := openDisk(t, p, "nbd0")
	a, _, err := p.Assess(pol, disk, ScopeFor(pol))
	if err != nil {
		t.Fatal(err)
	}
	before := queueFile(t, p, a.Device, "nr_requests")
	if before == "32" || len(a.Plan.Changes) != 1 {
		t.Fatalf("nbd0: nr_requests %s, plan %+v; the test needs one change to make", before, a.Plan.Changes)
	}

	lockFile := filepath.Join(t.TempDir(), "disks.lock")
	writer, prober := disklock.New(lockFile), disklock.New(lockFile)
	defer writer.Close()
	defer prober.Close()
	unlock, err := prober.Lock("nbd0")
	if err != nil {
		t.Fatal(err)
	}
	prepared := false
	res, err := p.Write(context.Background(), writer, apply.Applier{}, disk, a.Plan, func() { prepared = true })
	if !disklock.IsBusy(err) || prepared || res.Writes != 0 || queueFile(t, p, a.Device, "nr_requests") != before {
		t.Errorf("held by a probe: err %v, prepared %v, %d writes; want busy and nothing done", err, prepared, res.Writes)
	}
	res, err = p.Write(context.Background(), writer, apply.Applier{DryRun: true}, disk, a.Plan, nil)
	if err != nil || res.Writes != 0 || len(res.Outcomes) != 1 || res.Outcomes[0].Status != apply.Planned {
		t.Errorf("dry run while held: err %v, %+v; want the change planned, no lock asked", err, res)
	}
	unlock()

	var heldInPrepare, writtenBeforePrepare bool
	res, err = p.Write(context.Background(), writer, apply.Applier{}, disk, a.Plan, func() {
		heldInPrepare = prober.Held("nbd0")
		writtenBeforePrepare = queueFile(t, p, a.Device, "nr_requests") != before
	})
	if err != nil || res.Failed() || res.Writes != 1 || queueFile(t, p, a.Device, "nr_requests") != "32" {
		t.Fatalf("write: err %v, %+v; want nr_requests 32 written", err, res)
	}
	if !heldInPrepare || writtenBeforePrepare {
		t.Errorf("prepare: lock held %v, disk already written %v; want it run under the lock before the writes", heldInPrepare, writtenBeforePrepare)
	}
	if prober.Held("nbd0") {
		t.Errorf("the disk's lock is still held after Write returned")
	}
}

// A [rule.probe] that measures nr_requests decides it with the scheduler:
// the plan switches the scheduler, then writes the winner's nr_requests
// as the probe read it back (the switch resets it), both by the rule with
// the probe's provenance.
func TestAssessProbeDecidesNrRequests(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, cloudTree)
	vda, err := p.FS.Device("vda")
	if err != nil {
		t.Fatal(err)
	}
	pol := parse(t, `
[[rule]]
name = "virtio disks"
[rule.match]
class = ["virtio"]
[rule.probe]
candidates = ["none", "mq-deadline"]
nr_requests = ["default", 32]
engine = "psync"
`)
	o := probe.DefaultOptions()
	cand := func(name string, nr, set int, iops float64) probe.Candidate {
		f := probe.Figures{IOPS: iops, QD1P99: 50}
		return probe.Candidate{Scheduler: name, NrRequests: nr, NrRequestsSet: set, Figures: f,
			Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f}}}
	}
	figs := []probe.Candidate{cand("mq-deadline", 0, 256, 50e3), cand("mq-deadline", 32, 32, 60e3), cand("none", 0, 128, 70e3), cand("none", 32, 32, 90e3)}
	rec := probe.Record{
		Key: probe.KeyOf(p.FS, vda), Device: "vda", At: time.Now().UTC(),
		Method: probe.Method{Engine: probe.EnginePsync, Depth: o.Depth, BlockSize: o.BlockSize, Depths: o.Depths,
			Candidates: []string{"none", "mq-deadline"}, NrRequests: []int{0, 32}},
		Rounds: 1, Figures: figs, Decision: probe.Decide(o.Choose, o.Margin, "mq-deadline nr_requests default", figs),
	}
	for i := range rec.Figures {
		rec.Figures[i].Curve = nil
	}
	rec.Depths = nil // a record without a curve serves any
	if err := probe.OpenStore(p.StateDir, nil).Remember(rec); err != nil {
		t.Fatal(err)
	}
	a, probeErr, err := p.Assess(pol, openDisk(t, p, "vda"), ScopeFor(pol))
	if err != nil || probeErr != nil {
		t.Fatalf("assess: %v, probe look-up: %v", err, probeErr)
	}
	if a.Probe.Pending() || a.Probe.Report.Winner != "none" || a.Probe.Report.WinnerNr != 32 {
		t.Fatalf("decision %+v, want none with nr_requests 32", a.Probe.Report.Decision)
	}
	sched, nr := change(a.Plan, "scheduler"), change(a.Plan, "nr_requests")
	if sched == nil || sched.To != "none" || nr == nil || nr.To != "32" || !strings.HasPrefix(nr.Rule, "virtio disks (probe: ") {
		t.Fatalf("changes %+v; want scheduler none, then nr_requests 32 by the probing rule", a.Plan.Changes)
	}
	si := slices.IndexFunc(a.Plan.Changes, func(c plan.Change) bool { return c.Attribute == "scheduler" })
	ni := slices.IndexFunc(a.Plan.Changes, func(c plan.Change) bool { return c.Attribute == "nr_requests" })
	if si > ni {
		t.Errorf("changes %+v: nr_requests before the scheduler, whose switch resets it", a.Plan.Changes)
	}
}
