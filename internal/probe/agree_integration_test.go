package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// agreeProfiles are the emulator's profiles slowed as internal/diskemu's
// own test serves them (a read spends 10-20 ms in the device), so that a
// user-space server on a busy 2-CPU machine keeps up with their rates.
var agreeProfiles = []struct {
	name string
	slow float64
}{
	{"local-nvme", 200},
	{"network-ssd", 15},
	{"burst", 10},
	{"hdd-network", 2},
	{"spinning", 3},
}

const (
	agreeDepth   = 16
	agreeFioReps = 3
	agreeFioTime = time.Second
)

// TestIntegrationProbeAgreesWithFio is the probe's benchmark against fio
// on every emulated profile: the probe (none against mq-deadline, the
// incumbent; deep-queue IOPS at depth 16; 3 rounds) must finish within the
// bound it announces, and wherever fio (the same depth, the schedulers
// alternating, 3 runs each) finds a difference larger than the margin and
// than twice its own spread, the probe's verdict must be fio's. Where fio
// finds none that large, any verdict but a disturbed one is accepted, as
// there is nothing to agree with. Each profile starts with full buckets
// (a burst disk's credits last through both), so the rate is the
// profile's. It logs a table: profile, bound, time taken, verdict, fio's
// medians and spread.
func TestIntegrationProbeAgreesWithFio(t *testing.T) {
	looptest.Require(t)
	fio, err := exec.LookPath("fio")
	if err != nil {
		looptest.Missing(t, "the probe is checked against fio (Debian package fio): "+err.Error())
	}
	live := liveFS(t)
	var table []string
	for i, ap := range agreeProfiles {
		p, err := diskemu.Lookup(ap.name)
		if err != nil {
			t.Fatal(err)
		}
		p = p.Slowed(ap.slow)
		t.Run(ap.name, func(t *testing.T) {
			e := diskemu.Start(t, 7691+i, p, 1<<30)
			_, offered, err := live.ReadScheduler(e.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(offered, "mq-deadline") || !slices.Contains(offered, "none") {
				looptest.Missing(t, fmt.Sprintf("%s offers %v: the check needs none and mq-deadline", e.Name, offered))
			}
			setSched := func(s string) {
				if err := live.WriteQueueAttr(e.Name, "scheduler", s); err != nil {
					t.Fatal(err)
				}
			}
			setSched("mq-deadline")

			e.Refill(t)
			state := t.TempDir()
			runner := &Runner{FS: live, StateDir: state, Locks: testLocks(t), Store: OpenStore(state, nil), Progress: func(s string) { t.Log(s) }}
			o := Options{Options: probeopt.Options{Duration: 300 * time.Millisecond, Rounds: 3, Depth: agreeDepth, Depths: []int{1, agreeDepth},
				Engine: EngineIOUring, Candidates: []string{"mq-deadline", "none"}, Choose: ChooseIOPS, Margin: 0.05}}
			rep, err := runner.Probe(context.Background(), e.Name, o, true, 0)
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if rep.ElapsedS > rep.BudgetS {
				t.Errorf("the probe took %.1fs, past the %.1fs it announced", rep.ElapsedS, rep.BudgetS)
			}
			if rep.Disturbed != "" {
				t.Errorf("a disk at its profile's steady rate found disturbed: %s", rep.Disturbed)
			}

			// fio at the same depth, the schedulers alternating.
			e.Refill(t)
			runs := map[string][]float64{}
			for rep := 0; rep < agreeFioReps; rep++ {
				order := []string{"mq-deadline", "none"}
				if rep%2 == 1 {
					slices.Reverse(order)
				}
				for _, s := range order {
					setSched(s)
					runs[s] = append(runs[s], fioIOPS(t, fio, e.Name, agreeDepth, agreeFioTime))
				}
			}
			setSched("mq-deadline")
			med := map[string]float64{}
			var spread float64
			for s, v := range runs {
				slices.Sort(v)
				med[s] = v[len(v)/2]
				spread = max(spread, (v[len(v)-1]-v[0])/med[s])
			}
			diff := med["none"]/med["mq-deadline"] - 1
			fioSays := "no difference"
			switch {
			case math.Abs(diff) <= 2*spread || math.Abs(diff) <= o.Margin:
			case diff > 0:
				fioSays = "none"
			default:
				fioSays = "mq-deadline"
			}
			verdict := rep.Winner
			if rep.NoDifference {
				verdict += " (no difference)"
			}
			row := fmt.Sprintf("| %s/%g | %.1f s | %.1f s | %s | none %.0f / mq-deadline %.0f IOPS (%+.0f%%, spread %.0f%%): %s |",
				ap.name, ap.slow, rep.BudgetS, rep.ElapsedS, verdict, med["none"], med["mq-deadline"], diff*100, spread*100, fioSays)
			table = append(table, row)
			t.Log(row)
			if fioSays != "no difference" && rep.Winner != fioSays {
				t.Errorf("the probe chose %s (%s); fio finds %s better by %+.0f%%, more than twice its spread %.0f%%",
					rep.Winner, rep.Reason, fioSays, diff*100, spread*100)
			}
		})
	}
	t.Logf("probe against fio, depth %d, %d fio runs of %v per scheduler:\n| profile/slowed | bound | took | verdict | fio |\n|---|---|---|---|---|\n%s",
		agreeDepth, agreeFioReps, agreeFioTime, strings.Join(table, "\n"))
}

// fioIOPS is fio's IOPS for 4 KiB random reads (io_uring, O_DIRECT,
// read-only) at depth on /dev/name for d.
func fioIOPS(t *testing.T, fio, name string, depth int, d time.Duration) float64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "fio.json")
	cmd := exec.Command(fio, "--name=agree", "--filename=/dev/"+name, "--readonly", "--rw=randread", "--bs=4096",
		"--direct=1", "--ioengine=io_uring", "--iodepth="+strconv.Itoa(depth), "--time_based",
		"--runtime="+strconv.FormatInt(d.Milliseconds(), 10)+"ms", "--invalidate=0", "--output-format=json", "--output="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fio on %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Jobs []struct {
			Read struct {
				IOPS float64 `json:"iops"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("fio's report on %s: %v\n%s", name, err, b)
	}
	return r.Jobs[0].Read.IOPS
}
