package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/eventually"
	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// Loop numbers 7350-7389 (see internal/looptest).

// TestMain runs the test binary as iosched when IOSCHED_CLI_CHILD_ARGS is
// set (newline-separated arguments): the process TestIntegrationProbeKilled
// starts and kills.
func TestMain(m *testing.M) {
	if args := os.Getenv("IOSCHED_CLI_CHILD_ARGS"); args != "" {
		os.Exit(Main(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func kyberOrBFQ(t *testing.T, fs sysfs.FS, name string) string {
	t.Helper()
	_, offered, err := fs.ReadScheduler(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"kyber", "bfq"} {
		if slices.Contains(offered, s) {
			if err := fs.WriteQueueAttr(name, "scheduler", s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	t.Fatalf("%s offers neither kyber nor bfq: %v", name, offered)
	return ""
}

// TestIntegrationProbeCommand: iosched probe --json on a loop device gives
// the documented shape, restores the original, remembers the result (a
// second run shows it without probing), and --export writes it.
func TestIntegrationProbeCommand(t *testing.T) {
	looptest.Require(t)
	fs, _ := sysfs.NewFS("/sys")
	l := looptest.Add(t, 7350)
	l.Bind(t, 64<<20)
	orig := kyberOrBFQ(t, fs, l.Name)
	state := t.TempDir()
	args := []string{"probe", l.Name, "--state-dir", state, "--duration", "50ms", "--rounds", "2", "--depth", "8", "--depths", "1,4,16"}

	out, errb, code := runMain(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errb)
	}
	var rep map[string]any
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, k := range []string{"device", "engine", "depth", "block_size", "duration_s", "rounds", "original", "restored", "nowait",
		"reads_before", "reads_after", "writes_before", "writes_after", "candidates", "winner", "reason", "remembered_as"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	cands, _ := rep["candidates"].([]any)
	if len(cands) != 2 {
		t.Fatalf("candidates: %v", rep["candidates"])
	}
	for _, c := range cands {
		m := c.(map[string]any)
		for _, k := range []string{"scheduler", "iops", "mib_s", "p50_us", "p99_us", "p999_us", "qd1_iops", "qd1_p50_us", "qd1_p99_us", "rounds"} {
			if _, ok := m[k]; !ok {
				t.Errorf("candidate lacks %q", k)
			}
		}
		if m["iops"].(float64) <= 0 || len(m["rounds"].([]any)) != 2 {
			t.Errorf("candidate %v", m)
		}
		checkCurve(t, "--json", m)
	}
	if ds, _ := rep["depths"].([]any); len(ds) != 3 {
		t.Errorf("--json depths %v, want 1, 4, 16", rep["depths"])
	}
	if rep["original"] != orig || rep["restored"] != true || rep["writes_before"] != rep["writes_after"] {
		t.Errorf("original %v restored %v writes %v -> %v", rep["original"], rep["restored"], rep["writes_before"], rep["writes_after"])
	}
	if !strings.Contains(string(errb), "at most") {
		t.Errorf("the time budget was not printed before starting:\n%s", errb)
	}
	if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur != orig {
		t.Errorf("scheduler %s after the probe, want %s", cur, orig)
	}

	// Remembered: the second run does not read the disk.
	before, _ := os.ReadFile("/sys/block/" + l.Name + "/stat")
	out, errb, code = runMain(t, args...)
	if code != 0 || !strings.Contains(string(out), "remembered") || !strings.Contains(string(out), rep["winner"].(string)) {
		t.Errorf("second run: exit %d\n%s%s", code, out, errb)
	}
	after, _ := os.ReadFile("/sys/block/" + l.Name + "/stat")
	if !bytes.Equal(before, after) {
		t.Errorf("a remembered result read the disk: stat %q -> %q", before, after)
	}

	exp := filepath.Join(t.TempDir(), "fleet.json")
	if _, errb, code := runMain(t, "probe", "--state-dir", state, "--export", exp); code != 0 {
		t.Fatalf("export: exit %d\n%s", code, errb)
	}
	b, err := os.ReadFile(exp)
	if err != nil || !strings.Contains(string(b), `"results"`) || !strings.Contains(string(b), l.Name) {
		t.Errorf("export: %v\n%s", err, b)
	}
	var fleet struct {
		Results []struct {
			Figures []map[string]any `json:"figures"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &fleet); err != nil || len(fleet.Results) != 1 || len(fleet.Results[0].Figures) != 2 {
		t.Fatalf("export: %v\n%s", err, b)
	}
	for _, m := range fleet.Results[0].Figures {
		checkCurve(t, "--export", m)
	}
	// The text report shows the curve, a line per candidate.
	out, errb, code = runMain(t, "probe", "--state-dir", state, "--duration", "50ms", "--rounds", "1", "--depth", "8", "--depths", "1,4,16", "--fresh", l.Name)
	if code != 0 || !strings.Contains(string(out), "curve: IOPS at each depth") || !strings.Contains(string(out), "curve at depths 1, 4, 16") {
		t.Errorf("text report: exit %d\n%s%s", code, out, errb)
	}
	for _, c := range cands {
		name := c.(map[string]any)["scheduler"].(string)
		if !slices.ContainsFunc(strings.Split(string(out), "\n"), func(line string) bool {
			f := strings.Fields(line)
			return len(f) > 0 && f[0] == name && strings.Contains(line, " 1: ") && strings.Contains(line, " 16: ")
		}) {
			t.Errorf("text report has no curve line for %s:\n%s", name, out)
		}
	}
	if _, errb, code := runMain(t, "probe", "--state-dir", state, "--depths", "16,4", l.Name); code != 2 || !strings.Contains(string(errb), "depths: 4 after 16: depths ascend, each once") {
		t.Errorf("--depths 16,4: exit %d\n%s", code, errb)
	}

	// Refusals exit non-zero and say why.
	if _, errb, code := runMain(t, "probe", "--state-dir", state, "--fresh", "--dev", t.TempDir(), l.Name); code == 0 || !strings.Contains(string(errb), "missing") {
		t.Errorf("missing node: exit %d\n%s", code, errb)
	}
	if _, errb, code := runMain(t, "probe", "--state-dir", state, "--duration", "1h", l.Name); code == 0 || !strings.Contains(string(errb), "duration") {
		t.Errorf("--duration 1h: exit %d\n%s", code, errb)
	}
	if _, errb, code := runMain(t, "probe", "--state-dir", state, "--rounds", "100", l.Name); code == 0 || !strings.Contains(string(errb), "rounds") {
		t.Errorf("--rounds 100: exit %d\n%s", code, errb)
	}
}

// checkCurve: a candidate of --json or an export has a curve point at each
// of 1, 4 and 16 with the documented fields, the disk's depth among them.
func checkCurve(t *testing.T, where string, m map[string]any) {
	t.Helper()
	curve, _ := m["curve"].([]any)
	if len(curve) != 3 {
		t.Errorf("%s: %v's curve %v: want points at 1, 4, 16", where, m["scheduler"], m["curve"])
		return
	}
	for i, p := range curve {
		pt, _ := p.(map[string]any)
		for _, k := range []string{"depth", "observed_depth", "iops", "p50_us", "p99_us"} {
			if _, ok := pt[k]; !ok {
				t.Errorf("%s: point %v lacks %q", where, pt, k)
			}
		}
		if pt["depth"] != float64([]int{1, 4, 16}[i]) || pt["iops"].(float64) <= 0 || pt["observed_depth"].(float64) <= 0 {
			t.Errorf("%s: point %d: %v", where, i, pt)
		}
	}
}

// TestIntegrationProbeKilled kills a probe with SIGKILL mid-measurement
// (a candidate in place, the originals recorded), then runs a second probe:
// the originals are back before it measures, and after.
func TestIntegrationProbeKilled(t *testing.T) {
	looptest.Require(t)
	fs, _ := sysfs.NewFS("/sys")
	l := looptest.Add(t, 7351)
	l.Bind(t, 64<<20)
	orig := kyberOrBFQ(t, fs, l.Name)
	if err := fs.WriteQueueAttr(l.Name, "nr_requests", "32"); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	record := filepath.Join(state, "probe-"+l.Name+".originals.json")

	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "IOSCHED_CLI_CHILD_ARGS="+strings.Join(
		[]string{"--lock-file", filepath.Join(t.TempDir(), "disks.lock"), "probe", l.Name, "--state-dir", state, "--fresh", "--duration", "2s", "--rounds", "3"}, "\n"))
	var childErr bytes.Buffer
	child.Stderr = &childErr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until it has switched away from the original.
	if !eventually.Within(10*time.Second, func() bool {
		cur, _ := fs.ReadQueueAttr(l.Name, "scheduler")
		_, err := os.Stat(record)
		return err == nil && cur != orig
	}) {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("the probe never switched the scheduler\n%s", childErr.String())
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur == orig {
		t.Fatalf("scheduler is %s already: the kill came too late to test anything", cur)
	}

	_, errb, code := runMain(t, "probe", l.Name, "--state-dir", state, "--fresh", "--duration", "30ms", "--rounds", "1")
	if code != 0 {
		t.Fatalf("second probe: exit %d\n%s", code, errb)
	}
	if !strings.Contains(string(errb), "restored the settings an interrupted probe left") {
		t.Errorf("the second probe did not say it restored the first's settings:\n%s", errb)
	}
	d, err := fs.Device(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Had the record not been restored first, the second probe would have
	// taken the candidate left in place for the original.
	if *d.Scheduler != orig || d.Tunables["nr_requests"] != "32" {
		t.Errorf("after the second probe: scheduler %s nr_requests %s, want %s and 32", *d.Scheduler, d.Tunables["nr_requests"], orig)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Errorf("the record is still there: %v", err)
	}
}

// TestIntegrationProbeConcurrent: a second probe of a disk being probed is
// refused with a clear error, also when it was given another state
// directory (the lock is the machine's).
func TestIntegrationProbeConcurrent(t *testing.T) {
	looptest.Require(t)
	fs, _ := sysfs.NewFS("/sys")
	l := looptest.Add(t, 7352)
	l.Bind(t, 64<<20)
	orig := kyberOrBFQ(t, fs, l.Name)
	state := t.TempDir()
	lockFile := filepath.Join(t.TempDir(), "disks.lock")
	first := make(chan int)
	go func() {
		_, _, code := runMain(t, "--lock-file", lockFile, "probe", l.Name, "--state-dir", state, "--fresh", "--duration", "300ms", "--rounds", "1")
		first <- code
	}()
	record := filepath.Join(state, "probe-"+l.Name+".originals.json")
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(record); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, errb, code := runMain(t, "--lock-file", lockFile, "probe", l.Name, "--state-dir", t.TempDir(), "--fresh", "--duration", "30ms", "--rounds", "1")
	if code == 0 || !strings.Contains(string(errb), "another probe of "+l.Name+" is running") {
		t.Errorf("second probe: exit %d\n%s", code, errb)
	}
	if c := <-first; c != 0 {
		t.Errorf("first probe: exit %d", c)
	}
	if cur, _ := fs.ReadQueueAttr(l.Name, "scheduler"); cur != orig {
		t.Errorf("scheduler %s, want %s", cur, orig)
	}
}
