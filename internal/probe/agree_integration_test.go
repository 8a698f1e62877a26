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
	// agreeLowNr is the nr_requests each disk starts with, below the
	// probe's depth, as a driver with a small queue has: reads past it
	// wait for a request, however many the device could serve.
	agreeLowNr = 4
)

// TestIntegrationProbeAgreesWithFio is the probe's benchmark against fio
// on every emulated profile. Each disk starts with mq-deadline and
// nr_requests 4 (agreeLowNr); the probe measures none and mq-deadline
// each with nr_requests 4 and the kernel's default (deep-queue IOPS at
// depth 16; 3 rounds; the incumbent is the disk's mq-deadline with 4). It
// must finish within the bound it announces and put both settings back.
// fio then runs at the same depth on each candidate in turn, the
// candidates alternating, 3 runs each, with the scheduler and the
// nr_requests the probe reported set. Wherever fio finds a challenger
// better than the incumbent by more than the margin and than twice its
// own spread, the probe's winner must be one fio finds so; wherever fio
// finds one worse by as much, the probe must not choose it. Elsewhere
// there is nothing to agree with. The low pool against one deeper than
// the depth differs far beyond noise on a disk that serves more than 4
// reads at once: at least one profile must show fio such a difference, or
// the agreement was never put to the test. Each profile starts with full
// buckets (a burst disk's credits last through both), so the rate is the
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
	differed := 0
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
			tags := readTags(t, e.Name)
			write := func(attr, v string) {
				if err := live.WriteQueueAttr(e.Name, attr, v); err != nil {
					t.Fatal(err)
				}
			}
			// set gives the disk sched with a pool of nr and its full
			// hardware tags: under none, nr_requests is the depth of
			// the tags in use, which a pool of 4 under none shrinks for
			// every scheduler until a write of another value under none
			// grows them back.
			set := func(sched string, nr int) {
				write("scheduler", "none")
				write("nr_requests", strconv.Itoa(tags-1))
				write("nr_requests", strconv.Itoa(tags))
				if sched != "none" {
					write("scheduler", sched)
				}
				write("nr_requests", strconv.Itoa(nr))
			}
			set("mq-deadline", agreeLowNr)

			e.Refill(t)
			state := t.TempDir()
			runner := &Runner{FS: live, StateDir: state, Locks: testLocks(t), Store: OpenStore(state, nil), Progress: func(s string) { t.Log(s) }}
			o := Options{Options: probeopt.Options{Duration: 300 * time.Millisecond, Rounds: 3, Depth: agreeDepth, Depths: []int{1, agreeDepth},
				Engine: EngineIOUring, Candidates: []string{"mq-deadline", "none"}, NrRequests: []int{agreeLowNr, probeopt.NrRequestsDefault},
				Choose: ChooseIOPS, Margin: 0.05}}
			rep, err := runner.Probe(context.Background(), diskName(t, e.Name), o, true, 0)
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if rep.ElapsedS > rep.BudgetS {
				t.Errorf("the probe took %.1fs, past the %.1fs it announced", rep.ElapsedS, rep.BudgetS)
			}
			if rep.Disturbed != "" {
				t.Errorf("a disk at its profile's steady rate found disturbed: %s", rep.Disturbed)
			}
			sched, _, err := live.ReadScheduler(e.Name)
			if err != nil {
				t.Fatal(err)
			}
			nr, err := live.ReadQueueAttr(e.Name, "nr_requests")
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Restored || sched != "mq-deadline" || nr != strconv.Itoa(agreeLowNr) {
				t.Errorf("after the probe: restored %v, scheduler %s, nr_requests %s; want mq-deadline and %d back", rep.Restored, sched, nr, agreeLowNr)
			}
			inc := fmt.Sprintf("mq-deadline nr_requests %d", agreeLowNr)
			if rep.Incumbent != inc || len(rep.Candidates) != 4 {
				t.Fatalf("incumbent %q, %d candidates; want %q of 4", rep.Incumbent, len(rep.Candidates), inc)
			}
			winner := ""
			for _, c := range rep.Candidates {
				if c.NrRequestsSet <= 0 {
					t.Fatalf("%s: no nr_requests read back", c.Name())
				}
				if c.Won(rep.Decision) {
					winner = c.Name()
				}
			}

			// fio at the same depth, each candidate's settings as the
			// probe set them, the candidates alternating.
			e.Refill(t)
			runs := map[string][]float64{}
			for r := 0; r < agreeFioReps; r++ {
				order := slices.Clone(rep.Candidates)
				if r%2 == 1 {
					slices.Reverse(order)
				}
				for _, c := range order {
					set(c.Scheduler, c.NrRequestsSet)
					runs[c.Name()] = append(runs[c.Name()], fioIOPS(t, fio, e.Name, agreeDepth, agreeFioTime))
				}
			}
			set("mq-deadline", agreeLowNr)
			med := map[string]float64{}
			var spread float64
			for s, v := range runs {
				slices.Sort(v)
				med[s] = v[len(v)/2]
				spread = max(spread, (v[len(v)-1]-v[0])/med[s])
			}
			var better, worse, fioText []string
			for _, c := range rep.Candidates {
				fioText = append(fioText, fmt.Sprintf("%s %.0f", c.Label(), med[c.Name()]))
				if c.Name() == inc {
					continue
				}
				diff := med[c.Name()]/med[inc] - 1
				switch {
				case math.Abs(diff) <= 2*spread || math.Abs(diff) <= o.Margin:
				case diff > 0:
					better = append(better, c.Name())
				default:
					worse = append(worse, c.Name())
				}
			}
			if len(better)+len(worse) > 0 {
				differed++
			}
			verdict := winner
			if rep.NoDifference {
				verdict += " (no difference)"
			}
			fioSays := "no difference"
			if len(better) > 0 {
				fioSays = "better: " + strings.Join(better, ", ")
			} else if len(worse) > 0 {
				fioSays = "incumbent kept"
			}
			row := fmt.Sprintf("| %s/%g | %.1f s | %.1f s | %s | %s (spread %.0f%%): %s |",
				ap.name, ap.slow, rep.BudgetS, rep.ElapsedS, verdict, strings.Join(fioText, ", "), spread*100, fioSays)
			table = append(table, row)
			t.Log(row)
			switch {
			case len(better) > 0 && !slices.Contains(better, winner):
				t.Errorf("the probe chose %s (%s); fio finds only %s better than %s by more than twice its spread %.0f%% (medians %v)",
					winner, rep.Reason, strings.Join(better, ", "), inc, spread*100, med)
			case slices.Contains(worse, winner):
				t.Errorf("the probe chose %s (%s); fio finds it worse than %s by more than twice its spread %.0f%% (medians %v)",
					winner, rep.Reason, inc, spread*100, med)
			}
		})
	}
	t.Logf("probe against fio, depth %d, %d fio runs of %v per candidate:\n| profile/slowed | bound | took | verdict | fio IOPS |\n|---|---|---|---|---|\n%s",
		agreeDepth, agreeFioReps, agreeFioTime, strings.Join(table, "\n"))
	if differed == 0 && !t.Failed() {
		t.Errorf("on no profile did fio find a candidate beyond twice its spread from the incumbent: the agreement was not put to the test")
	}
}

// readTags reads the disk's hardware tags (mq/0/nr_tags).
func readTags(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/sys/block/" + name + "/mq/0/nr_tags")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= probeopt.MinNrRequests {
		t.Fatalf("%s's hardware tags %q: %v", name, b, err)
	}
	return n
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
