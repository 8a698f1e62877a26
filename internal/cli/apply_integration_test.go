package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// TestIntegrationApplyLoops runs plan and apply on real loop devices
// 7210-7212 with a policy that matches only them (and names them on the
// command line too).
func TestIntegrationApplyLoops(t *testing.T) {
	looptest.Require(t)
	loops := []*looptest.Loop{looptest.Add(t, 7210), looptest.Add(t, 7211), looptest.Add(t, 7212)}
	loops[0].Bind(t, 8<<20)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte(`
[[rule]]
name = "test loops: mq-deadline"
[rule.match]
name = "loop721[0-2]"
[rule.set]
scheduler = "mq-deadline"
nr_requests = 64
[rule.set.iosched]
fifo_batch = 4
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(cmd ...string) []string {
		a := append([]string{"--policy", pol}, cmd...)
		for _, l := range loops {
			a = append(a, l.Name)
		}
		return a
	}
	if out, _, code := runMain(t, args("plan", "--detailed-exitcode")...); code != 2 {
		t.Fatalf("plan before apply: exit %d, want 2\n%s", code, out)
	}

	writes := func() int {
		out, errb, code := runMain(t, args("apply", "--json")...)
		if code != 0 {
			t.Fatalf("apply: exit %d\n%s%s", code, out, errb)
		}
		var res struct {
			Devices []struct {
				Name   string `json:"name"`
				Writes int    `json:"writes"`
			} `json:"devices"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, d := range res.Devices {
			n += d.Writes
		}
		return n
	}
	if n := writes(); n != 9 {
		t.Errorf("first apply: %d writes, want 9 (3 per disk)", n)
	}
	fs, _ := sysfs.NewFS("/sys")
	for _, l := range loops {
		d, err := fs.Device(l.Name)
		if err != nil {
			t.Fatal(err)
		}
		if *d.Scheduler != "mq-deadline" || d.Tunables["nr_requests"] != "64" || d.IOSched["fifo_batch"] != "4" {
			t.Errorf("%s: scheduler %s nr_requests %s fifo_batch %s", l.Name, *d.Scheduler, d.Tunables["nr_requests"], d.IOSched["fifo_batch"])
		}
	}
	if n := writes(); n != 0 {
		t.Errorf("second apply: %d writes, want 0", n)
	}
	if out, _, code := runMain(t, args("plan", "--detailed-exitcode")...); code != 0 {
		t.Errorf("plan after apply: exit %d, want 0\n%s", code, out)
	}
}
