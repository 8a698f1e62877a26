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
	"github.com/iosched/iosched/internal/treetest"
	"golang.org/x/sys/unix"
)

// crossingRecord is a probe result whose curves cross: mq-deadline 15%
// ahead at depths 1 and 2, none 50% ahead from depth 8 on.
func crossingRecord(key probe.Key, at time.Time) probe.Record {
	curve := func(iops ...float64) []probe.CurvePoint {
		var pts []probe.CurvePoint
		for i, d := range []int{1, 2, 8, 32} {
			pts = append(pts, probe.CurvePoint{Depth: d, ObservedDepth: float64(d), IOPS: iops[i]})
		}
		return pts
	}
	return probe.Record{
		Key: key, Device: "loop1", At: at.UTC(),
		Method: probe.Method{Engine: probe.EngineIOUring, Depth: 32, BlockSize: 4096, Depths: []int{1, 2, 8, 32}, Candidates: []string{"none", "mq-deadline"}},
		Figures: []probe.Candidate{
			{Scheduler: "none", Curve: curve(1000, 1000, 1500, 1500), Figures: probe.Figures{IOPS: 1500, QD1IOPS: 1000}},
			{Scheduler: "mq-deadline", Curve: curve(1150, 1150, 1000, 1000), Figures: probe.Figures{IOPS: 1000, QD1IOPS: 1150}},
		},
	}
}

// TestAdviseVerdict: the verdict names the candidate the curve favours at
// the depth, against the current scheduler, and says on what basis; a
// result from before curves is read as its two points.
func TestAdviseVerdict(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	rec := crossingRecord(probe.Key{}, at)
	old := rec
	old.Figures = []probe.Candidate{
		{Scheduler: "none", Figures: probe.Figures{IOPS: 3000, QD1IOPS: 900}},
		{Scheduler: "mq-deadline", Figures: probe.Figures{IOPS: 2000, QD1IOPS: 1000}},
	}
	for _, tc := range []struct {
		rec      probe.Record
		from     string
		depth    float64
		current  string
		favoured string
		gain     float64
		basis    string
	}{
		{rec, "remembered", 1, "none", "mq-deadline", 0.15,
			"at depth 1 the probe measured mq-deadline 1.15x none's IOPS (curve of 2026-12-01, remembered)"},
		{rec, "seeded from /etc/fleet.json", 23.4, "none", "none", 0.5,
			"at depth 23 the probe measured none (the current scheduler) 1.50x mq-deadline's IOPS (curve of 2026-12-01, seeded from /etc/fleet.json)"},
		{rec, "remembered", 32, "mq-deadline", "none", 0.5,
			"at depth 32 the probe measured none 1.50x mq-deadline's IOPS (curve of 2026-12-01, remembered)"},
		{rec, "remembered", 1.5, "kyber", "mq-deadline", 0.15,
			"at depth 1.5 the probe measured mq-deadline 1.15x none's IOPS (curve of 2026-12-01, remembered)"},
		{old, "remembered", 32, "none", "none", 0.5,
			"at depth 32 the probe measured none (the current scheduler) 1.50x mq-deadline's IOPS (depths 1 and 32 of 2026-12-01, remembered)"},
	} {
		v, basis, ok := verdict(&tc.rec, tc.from, tc.depth, tc.current)
		if !ok || v.Favoured != tc.favoured || basis != tc.basis || v.Gain() < tc.gain-1e-9 || v.Gain() > tc.gain+1e-9 {
			t.Errorf("depth %v, current %s: %v %q gain %v\nwant %s %q gain %v", tc.depth, tc.current, ok, basis, v.Gain(), tc.favoured, tc.basis, tc.gain)
		}
	}
	one := rec
	one.Figures = one.Figures[:1]
	if _, basis, ok := verdict(&one, "remembered", 4, "none"); ok || !strings.Contains(basis, "fewer than two candidates") {
		t.Errorf("one candidate: %v %q", ok, basis)
	}
}

// TestAdviseFakeTree: on a copied tree (its stat files do not move) every
// disk is idle and gets no verdict; a disk without a stat file is not
// sampled, named with the file, and advise exits 1; --interval must be
// positive.
func TestAdviseFakeTree(t *testing.T) {
	t.Parallel()
	root := treetest.Copy(t, "../../testdata/sysfs/cloud")
	for _, d := range []string{"vda", "nvme0n1"} {
		if err := os.WriteFile(filepath.Join(root, "block", d, "stat"), []byte("100 0 800 50 0 0 0 0 0 40 50 0 0 0 0 0 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(t.TempDir(), "empty.toml")
	if err := os.WriteFile(pol, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, code := runMain(t, "--sysfs", root, "--policy", pol, "advise", "--interval", "10ms", "--json", "--state-dir", t.TempDir(), "vda", "nvme0n1", "loop0")
	if code != 1 {
		t.Errorf("exit %d, want 1 (loop0 has no stat file)\n%s", code, errb)
	}
	var got struct {
		IntervalS float64 `json:"interval_s"`
		Devices   []map[string]any
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.IntervalS != 0.01 || len(got.Devices) != 3 {
		t.Fatalf("%s", out)
	}
	for _, d := range got.Devices[:2] {
		if d["basis"] != "idle: no basis" || d["favoured"] != nil || d["gain"] != nil || d["iops"] != 0.0 || d["scheduler"] == "" {
			t.Errorf("an idle disk: %v", d)
		}
	}
	if e, _ := got.Devices[2]["error"].(string); !strings.Contains(e, filepath.Join(root, "block", "loop0", "stat")) {
		t.Errorf("the disk without a stat file: %v", got.Devices[2])
	}
	out, _, _ = runMain(t, "--sysfs", root, "--policy", pol, "advise", "--interval", "10ms", "vda")
	if !strings.Contains(string(out), "vda: idle: no basis") || !strings.Contains(string(out), "BUSY DEPTH") {
		t.Errorf("text:\n%s", out)
	}
	if _, errb, code := runMain(t, "--sysfs", root, "advise", "--interval", "0s"); code != 2 || !strings.Contains(string(errb), "--interval") {
		t.Errorf("--interval 0: exit %d %s", code, errb)
	}
}

// TestAdviseFIFO: a FIFO where a disk's stat file or one of its attributes
// should be (a copied tree) fails that disk with an error naming the file,
// and advise ends: opening a FIFO for reading would wait for a writer,
// past every signal.
func TestAdviseFIFO(t *testing.T) {
	t.Parallel()
	root := treetest.Copy(t, "../../testdata/sysfs/cloud")
	stat := filepath.Join(root, "block", "vda", "stat")
	if err := unix.Mkfifo(stat, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "block", "nvme0n1", "stat"), []byte("100 0 800 50 0 0 0 0 0 40 50 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{"queue/scheduler", "size", "device/model", "mq/0/nr_tags"} {
		p := filepath.Join(root, "block", "nvme0n1", attr)
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(t.TempDir(), "empty.toml")
	if err := os.WriteFile(pol, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out, errb []byte
		code      int
	}
	done := make(chan result, 1)
	go func() {
		out, errb, code := runMain(t, "--sysfs", root, "--policy", pol, "advise", "--interval", "10ms", "--state-dir", t.TempDir(), "vda", "nvme0n1")
		done <- result{out, errb, code}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		// Unblock the open so the test's goroutine can end.
		for _, p := range []string{stat, filepath.Join(root, "block", "nvme0n1", "queue/scheduler")} {
			if f, err := os.OpenFile(p, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
		t.Fatal("advise did not end: it waits on a FIFO")
	}
	if r.code != 1 || !strings.Contains(string(r.out), "vda: not sampled: "+stat+": not a regular file (a FIFO)") {
		t.Errorf("exit %d, want 1 and vda's stat file named as a FIFO\n%s%s", r.code, r.out, r.errb)
	}
	if !strings.Contains(string(r.out), "nvme0n1: the disk's scheduler could not be read") {
		t.Errorf("nvme0n1, its scheduler a FIFO:\n%s", r.out)
	}
}

// TestAdviseBadFlag: a flag that does not parse is a usage error, exit 2
// as the help says, like an --interval out of range.
func TestAdviseBadFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--interval", "abc"}, {"--json=maybe"}, {"--no-such-flag"}} {
		_, errb, code := runMain(t, append([]string{"--sysfs", "../../testdata/sysfs/cloud", "advise"}, args...)...)
		if code != 2 || !strings.Contains(string(errb), strings.TrimPrefix(strings.SplitN(args[0], "=", 2)[0], "--")) {
			t.Errorf("advise %s: exit %d, want 2\n%s", strings.Join(args, " "), code, errb)
		}
	}
}

// A seeded result that favours a scheduler no kernel has ("frobnicate")
// is not advice: advise finds no result, and warns naming the file and
// the result. Before, it printed "favours frobnicate by 15%".
func TestAdviseRefusesAnUnknownScheduler(t *testing.T) {
	t.Parallel()
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	dev, err := fs.DeviceFacts("vda", sysfs.FactIdentity|sysfs.FactSize|sysfs.FactHWQueues)
	if err != nil {
		t.Fatal(err)
	}
	rec := crossingRecord(probe.KeyOf(fs, dev), time.Now().Add(-time.Hour))
	rec.Candidates = []string{"none", "frobnicate"}
	rec.Figures[1].Scheduler = "frobnicate"
	seed := filepath.Join(t.TempDir(), "fleet.json")
	b, err := json.Marshal(map[string]any{"version": 1, "results": []probe.Record{rec}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	src := &resultSource{stateDir: t.TempDir(), store: probe.OpenStore(t.TempDir(), []string{seed}), now: time.Now()}
	if r, from := src.find(fs, dev); r != nil {
		t.Errorf("found %s's result (%s), favouring %v", r.Device, from, r.Candidates)
	}
	if len(src.errs) != 1 || !strings.Contains(src.errs[0].Error(), seed+`: result 1 (device loop1): not used: candidate "frobnicate" is not a scheduler`) {
		t.Errorf("warnings %v, want the seed's result named", src.errs)
	}
}
