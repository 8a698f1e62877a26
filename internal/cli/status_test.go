package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/statefile"
)

func runStatus(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"status"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeState(t *testing.T, dir string, st *statefile.State) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Exit 3 when no daemon runs, as systemctl status does.
func TestStatusExit3WhenNoDaemonRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, stdout, stderr := runStatus(t, "--runtime-dir", dir)
	if code != 3 || stdout != "" || !strings.Contains(stderr, "no daemon is running") {
		t.Errorf("no state file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// The state file of a daemon that died without removing it.
	writeState(t, dir, &statefile.State{PID: 2147483646})
	if code, _, stderr := runStatus(t, "--runtime-dir", dir, "--json"); code != 3 || !strings.Contains(stderr, "has exited") {
		t.Errorf("dead daemon: exit %d, stderr %q", code, stderr)
	}
}

func TestStatusShowsTheDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	st := &statefile.State{
		PID:       os.Getpid(), // alive: this test
		ProcStart: statefile.StartTime(os.Getpid()),
		Exe:       statefile.Exe(os.Getpid()),
		Started:   at,
		Updated:   at.Add(time.Minute),
		Policy:    statefile.PolicyState{Sources: []string{"/etc/iosched/policy.toml"}, UeventSource: "kernel", ReconcileInterval: "1m0s"},
		LastReload: &statefile.Reload{At: at.Add(30 * time.Second), OK: false,
			Errors: []string{`/etc/iosched/policy.toml:3:1: rule 1 "x": set.readahead_kb: unknown key; did you mean "read_ahead_kb"?`}},
		LastScan:       &statefile.Scan{At: at.Add(30 * time.Second), Reason: "reconcile", Disks: 3, Writes: 0, Seconds: 0.0042},
		LastChange:     &statefile.Change{At: at.Add(10 * time.Second), Device: "loop20000", Attribute: "scheduler", From: "none", To: "mq-deadline", Rule: "loops", Drift: true},
		LastBurst:      &statefile.Burst{Disks: 1000, P50: 0.0812, P99: 0.1931, Max: 0.2104, Start: at.Add(40 * time.Second), End: at.Add(41 * time.Second)},
		Metrics:        &statefile.Metrics{File: "/var/lib/prometheus/node-exporter/iosched.prom", Error: "writing metrics: permission denied"},
		PolicyFollowed: true,
		Managed:        2,
		Disks: map[string]*statefile.DiskState{
			"loop20000": {Class: "loop", Rules: []string{"loops"}, Settings: []statefile.Applied{
				{Attribute: "scheduler", Value: "mq-deadline", Rule: "loops"}, {Attribute: "nr_requests", Value: "64", Rule: "loops"}}},
			"loop20001": {Class: "loop", Rules: []string{"loops"}, Settings: []statefile.Applied{
				{Attribute: "scheduler", Value: "none", Want: "bfq", Rule: "loops"}},
				Skipped:   []plan.Skip{{Attribute: "iosched/slice_idle", Reason: "not a parameter of none"}},
				LastError: &statefile.Problem{At: at.Add(20 * time.Second), Message: "scheduler: write: invalid argument"}},
			"vda": {Class: "virtio", Rules: []string{}, Settings: []statefile.Applied{}},
		},
	}
	writeState(t, dir, st)
	code, out, stderr := runStatus(t, "--runtime-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("iosched daemon: running (pid %d) since 2025-03-01 12:00:00", os.Getpid()),
		"policy: /etc/iosched/policy.toml (uevents: kernel, reconcile: 1m0s, restore on exit: no, follows its files: yes)",
		"last burst: 2025-03-01 12:00:41, 1000 disks: uevent to applied p50 81.2ms, p99 193.1ms, max 210.4ms",
		"metrics: /var/lib/prometheus/node-exporter/iosched.prom: FAILING: writing metrics: permission denied",
		"last reload: 2025-03-01 12:00:30, FAILED: the previous policy is still in force",
		`  /etc/iosched/policy.toml:3:1: rule 1 "x": set.readahead_kb: unknown key`,
		"last scan: 2025-03-01 12:00:30 (reconcile): 3 disks, 0 writes, 4.2ms",
		"last change: 2025-03-01 12:00:10 loop20000 scheduler: none -> mq-deadline (loops) (drift repaired)",
		"last error: none",
		"disks: 2 managed, 3 seen",
		"loop20000  loop   scheduler=mq-deadline nr_requests=64  loops",
		"loop20001  loop   scheduler=none (want bfq)",
		"loop20001: iosched/slice_idle not set: not a parameter of none",
		"loop20001: error at 2025-03-01 12:00:20: scheduler: write: invalid argument",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "vda") {
		t.Errorf("a disk no rule matches is listed without --all:\n%s", out)
	}
	if _, out, _ := runStatus(t, "--runtime-dir", dir, "--all"); !strings.Contains(out, "vda        virtio  -") {
		t.Errorf("--all does not list vda:\n%s", out)
	}

	code, out, _ = runStatus(t, "--runtime-dir", dir, "--json")
	var got statefile.State
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if got.PID != st.PID || got.Disks["loop20001"].Settings[0].Want != "bfq" || got.LastReload.OK ||
		got.LastBurst == nil || got.LastBurst.P99 != 0.1931 || got.LastBurst.Disks != 1000 || !got.PolicyFollowed {
		t.Errorf("--json lost data:\n%s", out)
	}
}

// What keeps the daemon from doing all its job shows: a failure to save the
// original values, disks whose originals are unknown, records moved aside
// as unreadable, warnings, refused writes, writes still in the kernel (on
// a disk no rule manages any more too), a disk another process's lock
// keeps from being written. Before, a failed save left "last
// error: none", and an unreadable probe record was deleted unseen.
func TestStatusShowsFaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	st := &statefile.State{
		PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: statefile.Exe(os.Getpid()), Started: at,
		PersistenceError: &statefile.Problem{At: at, Message: "saving the original values: read-only file system"},
		OriginalsUnknown: []string{"loop20001"},
		OriginalsAside:   []string{"/var/lib/iosched/probe-vda.originals.json.unreadable-20250301T120000.000000000Z"},
		Warnings:         []string{"uevent_source is udev, but no udevd runs"},
		Policy:           statefile.PolicyState{SeedErrors: []string{`seeded probe results: /etc/iosched/probes.d/a.json: result 2 (device vdf): not used: candidate "frobnicate" is not a scheduler`}},
		Disks: map[string]*statefile.DiskState{
			"loop20000": {Class: "loop", Rules: []string{"loops"}, Refused: []statefile.Refusal{
				{Attribute: "nr_requests", Value: "100000", Error: "write: invalid argument", Since: at, Retry: at.Add(time.Minute)}}},
			"loop20002": {InFlight: []statefile.InFlight{{What: "restore", Since: at}}},
			"loop20003": {Class: "loop", Held: &statefile.Problem{At: at, Message: "loop20003: its lock in /run/lock/iosched/disks.lock is held"}},
		},
	}
	writeState(t, dir, st)
	code, out, stderr := runStatus(t, "--runtime-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"saving state: FAILING since 2025-03-01 12:00:00: saving the original values: read-only file system",
		"original values unknown (restore on exit cannot put them back): loop20001",
		"original values records unreadable, moved aside (nothing was restored from them; check those disks by hand): /var/lib/iosched/probe-vda.originals.json.unreadable-20250301T120000.000000000Z",
		"warning: uevent_source is udev, but no udevd runs",
		"seeded probe results: 1 error(s), those results not used:\n  seeded probe results: /etc/iosched/probes.d/a.json: result 2 (device vdf): not used: candidate \"frobnicate\" is not a scheduler\n",
		"loop20000: nr_requests=100000 refused since 2025-03-01 12:00:00 (write: invalid argument); next try 2025-03-01 12:01:00",
		"loop20002: write in flight since 2025-03-01 12:00:00: restore (the disk has not answered it yet)",
		"loop20003: not written since 2025-03-01 12:00:00: loop20003: its lock in /run/lock/iosched/disks.lock is held",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusShowsProbes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	st := &statefile.State{
		PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: statefile.Exe(os.Getpid()), Started: at,
		Disks: map[string]*statefile.DiskState{
			"loop20000": {Class: "loop", Rules: []string{"probed"}, Probe: &statefile.ProbeState{Rule: "probed", Status: "decided", Winner: "none",
				Provenance: "probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%", From: "seeded from /etc/iosched/probes.d/fleet.json", Since: at}},
			"loop20001": {Class: "loop", Rules: []string{"probed"}, Probe: &statefile.ProbeState{Rule: "probed", Status: "pending", Interim: "mq-deadline",
				Error: "the disk is busy", Since: at}},
		},
	}
	writeState(t, dir, st)
	code, out, stderr := runStatus(t, "--runtime-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`loop20000: scheduler none by probe (rule "probed"; probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%; seeded from /etc/iosched/probes.d/fleet.json)`,
		`loop20001: probe pending (rule "probed"); interim scheduler mq-deadline; last try: the disk is busy`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusShowsAdaptiveDisks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	const reason = "adapt: busy depth 23 over 10m; curve: none 1.52x mq-deadline at depth 23"
	st := &statefile.State{
		PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: statefile.Exe(os.Getpid()), Started: at,
		Disks: map[string]*statefile.DiskState{
			"vdb": {Class: "virtio", Rules: []string{"adaptive"},
				Settings: []statefile.Applied{{Attribute: "scheduler", Value: "none", Rule: "adaptive (" + reason + ")"}},
				Adapt: &statefile.AdaptState{Rule: "adaptive", Sample: "5s", Window: "10m0s", Scheduler: "none", BusyDepth: 24.2, Busy: 0.97,
					WindowDepth: 23, WindowSeconds: 600, Favoured: "none", Gain: 0.52, SwitchesToday: 1,
					LastSwitch: &statefile.Switch{At: at, From: "mq-deadline", To: "none", Reason: reason},
					Held:       "min_interval 1h: the last switch was at 2025-03-01T12:00:00Z"}},
			"vdc": {Class: "virtio", Rules: []string{"adaptive"},
				Adapt: &statefile.AdaptState{Rule: "adaptive", Sample: "5s", Window: "10m0s", WindowSeconds: 30}},
		},
	}
	writeState(t, dir, st)
	code, out, stderr := runStatus(t, "--runtime-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`vdb   virtio  scheduler=none  adaptive`,
		`vdb: adapt (rule "adaptive", sample 5s, window 10m0s): scheduler none; busy depth 24 now (busy 97%), 23 over the window, where the curves favour none by 52%`,
		`vdb: adapt: switched mq-deadline -> none at 2025-03-01 12:00:00 (` + reason + `); 1 switch(es) in the last 24h`,
		`vdb: adapt: a switch waits: min_interval 1h: the last switch was at 2025-03-01T12:00:00Z`,
		`vdc: adapt (rule "adaptive", sample 5s, window 10m0s): scheduler the probe's (no switch yet); busy depth 0 now (busy 0%), the window (30s of it seen) idle`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// explain shows the rule that adapts a disk, and the running daemon's
// choice in place of the probe's decision, with its reason; without a
// daemon, that the probe's decision stands.
func TestExplainShowsTheAdaptiveChoice(t *testing.T) {
	inRepoRoot(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte(probePolicyText+"[rule.adapt]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(runtimeDir string) []string {
		return []string{"--sysfs", "testdata/sysfs/cloud", "--dev", "testdata/dev-empty", "--policy", pol,
			"explain", "vda", "--state-dir", filepath.Join(dir, "state"), "--runtime-dir", runtimeDir}
	}
	out, errb, code := runMain(t, args(filepath.Join(dir, "none"))...)
	if code != 0 || !strings.Contains(string(out), "\nadapt:\n  rule \"virtio disks\" switches the scheduler") ||
		!strings.Contains(string(out), "no running daemon follows the disk: the probe's decision stands") {
		t.Errorf("explain without a daemon: exit %d\n%s%s", code, out, errb)
	}

	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.Local)
	const reason = "adapt: busy depth 23 over 10m; curve: none 1.52x mq-deadline at depth 23"
	writeState(t, run, &statefile.State{
		PID: os.Getpid(), ProcStart: statefile.StartTime(os.Getpid()), Exe: statefile.Exe(os.Getpid()), Started: at,
		Disks: map[string]*statefile.DiskState{"vda": {Class: "virtio", Rules: []string{"virtio disks"},
			Adapt: &statefile.AdaptState{Rule: "virtio disks", Sample: "5s", Window: "10m0s", Scheduler: "none", BusyDepth: 23, Busy: 1,
				WindowDepth: 23, Favoured: "none", SwitchesToday: 1, LastSwitch: &statefile.Switch{At: at, From: "mq-deadline", To: "none", Reason: reason}}}},
	})
	out, errb, code = runMain(t, args(run)...)
	for _, want := range []string{
		"  scheduler = none, by the running daemon in place of the probe's decision (" + reason + ", at 2025-03-01 12:00:00)\n",
		"  adapt: switched mq-deadline -> none at 2025-03-01 12:00:00 (" + reason + "); 1 switch(es) in the last 24h\n",
	} {
		if code != 0 || !strings.Contains(string(out), want) {
			t.Errorf("explain with a daemon lacks %q: exit %d\n%s%s", want, code, out, errb)
		}
	}
	out, _, _ = runMain(t, append(args(run), "--json")...)
	var shown struct {
		Adapt *adaptShown `json:"adapt"`
	}
	if err := json.Unmarshal(out, &shown); err != nil || shown.Adapt == nil || shown.Adapt.Rule != "virtio disks" ||
		shown.Adapt.Daemon == nil || shown.Adapt.Daemon.Scheduler != "none" || shown.Adapt.Daemon.LastSwitch.Reason != reason {
		t.Errorf("explain --json lacks the adaptive state (%v):\n%s", err, out)
	}
}
