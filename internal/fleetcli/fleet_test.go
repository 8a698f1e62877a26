package fleetcli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/promtest"
)

// A fleet of four machines of one key: the command's table and verdict
// sentence, its JSON, its exported seeds, and its exit codes.
func TestFleetCommand(t *testing.T) {
	t.Parallel()
	const key = "virtio/virtio_blk/-/hwq1/qd256/10737418240B/6.18.0"
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// Half the busy time at depth 1, where none loses 10% on every
	// machine; half at (16,32], read a quarter of the way from 16 to 64,
	// where none gains 20% (m1, m2) or 40% (m3, m4).
	var fleet []promtest.Machine
	for i, gain := range []float64{1.2, 1.2, 1.4, 1.4} {
		fleet = append(fleet, promtest.Machine{Instance: "m" + string(rune('1'+i)) + ":9100", Disks: []promtest.Disk{{
			Name: "vda", Key: key, Source: "probed", Busy: map[int]float64{0: 0.25, 5: 0.25},
			Curves: map[string]map[int]float64{
				"none":        {1: 90, 16: 1000 * gain, 64: 1000 * gain},
				"mq-deadline": {1: 100, 16: 1000, 64: 1000},
			},
		}}})
	}
	srv := promtest.StartServer(t, promtest.ServerOptions{OpenMetrics: promtest.OpenMetrics(fleet, end, 2*time.Hour, time.Minute)})
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(append([]string{"--prometheus", srv.URL, "--range", "1h", "--at", end.Format(time.RFC3339)}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	t.Logf("iosched fleet:\n%s", out)
	// Median curves: none 90 at depth 1, 1300 at 16 and 64; the change
	// is (-10% + 30%) / 2 = +10%, by machine +5% and +15%.
	for _, want := range []string{
		key + "\n",
		"  4 machines, 4 disks, 2.0 busy disk-hours; the kernel's choice: mq-deadline\n",
		"  busy time by depth: 1 50%, 17-32 50%\n",
		"at this fleet's depths none gains 10% against mq-deadline (range +5% to +15% over 4 machines); 50% of busy time is at depth 1, where it loses 10%\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = run("--json")
	var rep struct {
		Keys []struct {
			Key      string `json:"key"`
			Machines int    `json:"machines"`
			Depths   []struct {
				Le    string  `json:"le"`
				Share float64 `json:"share"`
			} `json:"depths"`
			Verdicts []struct {
				Change float64 `json:"change"`
			} `json:"verdicts"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v: %s%s", code, err, out, errs)
	}
	if len(rep.Keys) != 1 || rep.Keys[0].Machines != 4 || len(rep.Keys[0].Depths) != 10 || rep.Keys[0].Depths[9].Le != "+Inf" ||
		len(rep.Keys[0].Verdicts) != 1 || rep.Keys[0].Verdicts[0].Change < 0.0999 || rep.Keys[0].Verdicts[0].Change > 0.1001 {
		t.Errorf("--json: %+v", rep)
	}
	seeds := filepath.Join(t.TempDir(), "fleet.json")
	if code, _, errs := run("--export-seeds", seeds); code != 0 || !strings.Contains(errs, "the curves of 1 key written to") {
		t.Errorf("--export-seeds: exit %d, %s", code, errs)
	}
	if b, err := os.ReadFile(seeds); err != nil || !strings.Contains(string(b), `"version": 1`) {
		t.Errorf("the seeded file: %v\n%s", err, b)
	}
	// Too few machines: the note, no verdict.
	if code, out, _ := run("--min-machines", "5"); code != 0 || !strings.Contains(out, "no verdict: only 4 machines, fewer than the 5 a verdict needs") {
		t.Errorf("--min-machines 5: exit %d:\n%s", code, out)
	}
	// Nothing matched: exit 1, said plainly.
	if code, _, errs := run("--match", `{class="nvme"}`); code != 1 || !strings.Contains(errs, "no observed disk matched") {
		t.Errorf("no match: exit %d, %s", code, errs)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{{"--range", "a week"}, {"--match", `class="nvme"`}, {"--no-such-flag"}, {"--min-machines", "0"}, {"--engine", "aio"}, {"--depth", "0x"}, {"--depth", "5000"}, {"--block-size", "1000"}} {
		if code, _, errs := run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
	if code := Main(nil, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("without --prometheus: exit %d, want 2", code)
	}
}
