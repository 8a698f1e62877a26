package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

func TestParseProbe(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "loops: probe"
[rule.match]
class = "loop"
[rule.set]
scheduler = "mq-deadline"
[rule.probe]
candidates = ["none", "kyber"]
duration = "250ms"
rounds = 5
depth = 64
depths = [1, 2, 8, 32]
block_size = "8KiB"
engine = "psync"
choose = "iops"
margin = "2.5%"
max_age = "30d"

[[rule]]
name = "defaults"
[rule.probe]

[daemon]
probe_concurrency = 2
probe_budget = "5m"
probe_results = ["/etc/iosched/probes.d/*.json"]
`
	p, err := Parse(File{Name: "p.toml", Data: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	want := &Probe{Options: probeopt.Options{Candidates: []string{"none", "kyber"}, Duration: 250 * time.Millisecond, Rounds: 5, Depth: 64,
		Depths: []int{1, 2, 8, 32}, BlockSize: 8192, Engine: "psync", Choose: "iops", Margin: 0.025}, MaxAge: 30 * 24 * time.Hour}
	if got := p.Rules[0].Probe(); !reflect.DeepEqual(got, want) {
		t.Errorf("probe = %+v, want %+v", got, want)
	}
	def := DefaultProbe()
	if got := p.Rules[1].Probe(); !reflect.DeepEqual(got, &def) {
		t.Errorf("empty [rule.probe] = %+v, want the defaults %+v", got, def)
	}
	d := Daemon{UeventSource: "kernel", ReconcileInterval: DefaultReconcileInterval, ProbeConcurrency: 2,
		ProbeBudget: 5 * time.Minute, ProbeResults: []string{"/etc/iosched/probes.d/*.json"}}
	if !reflect.DeepEqual(p.Daemon, d) {
		t.Errorf("daemon = %+v, want %+v", p.Daemon, d)
	}

	// The last matching rule's table is in force; a disk no probing rule
	// matches has none.
	loop := &sysfs.Device{Name: "loop0", Class: sysfs.ClassLoop}
	if got, rule := p.ProbeFor(loop); got == nil || rule != "defaults" || got.Rounds != 3 {
		t.Errorf("ProbeFor(loop) = %+v, %q", got, rule)
	}
	p2, err := Parse(File{Name: "q.toml", Data: []byte("[[rule]]\nname = \"x\"\nmatch.class = \"nvme\"\n[rule.probe]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p2.ProbeFor(loop); got != nil {
		t.Errorf("ProbeFor(loop) with an nvme-only rule = %+v", got)
	}
}

func TestParseProbeErrors(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "x"
[rule.probe]
candidates = ["none"]
duration = "10m"
rounds = 0
depth = 5000
block_size = "3KiB"
engine = "libaio"
choose = "fastest"
margin = 5
max_age = "1s"
workload = "randread"

[[rule]]
name = "y"
probe = "yes"
[rule.set]
candidates = ["none", "bfq"]

[[rule]]
name = "z"
[rule.probe]
candidates = ["none", "none", "b@d"]
margin = "90%"
block_size = 1048577

[daemon]
probe_concurrency = 0
probe_budget = "soon"
probe_results = ["etc/*.json", "/x/[.json"]
`
	want := []string{
		`p.toml:4:1: rule 1 "x": probe.candidates: want at least two schedulers to compare (or one, with two nr_requests), not 1`,
		`p.toml:5:1: rule 1 "x": probe.duration: 10m0s is outside 10ms..10s`,
		`p.toml:6:1: rule 1 "x": probe.rounds: 0 is outside 1..15`,
		`p.toml:7:1: rule 1 "x": probe.depth: 5000 is outside 1..1024`,
		`p.toml:8:1: rule 1 "x": probe.block_size: 3KiB is not a power of two`,
		`p.toml:9:1: rule 1 "x": probe.engine: "libaio" is not an engine: "io_uring" or "psync"`,
		`p.toml:10:1: rule 1 "x": probe.choose: "fastest" is not a choice: "balanced" (deep-queue IOPS without a depth-1 p99 regression), "iops" or "latency"`,
		`p.toml:11:1: rule 1 "x": probe.margin: want a percentage as a string, such as "5%", not an integer`,
		`p.toml:12:1: rule 1 "x": probe.max_age: 1s is shorter than a minute: every start would probe again`,
		`p.toml:13:1: rule 1 "x": probe.workload: unknown key (valid: candidates, duration, rounds, depth, depths, block_size, engine, choose, margin, max_age, nr_requests)`,
		`p.toml:17:1: rule 2 "y": probe: want a table ([rule.probe]), not a string`,
		`p.toml:19:1: rule 2 "y": set.candidates: unknown key here: "candidates" belongs in [rule.probe]`,
		`p.toml:24:23: rule 3 "z": probe.candidates: none is named twice`,
		`p.toml:24:31: rule 3 "z": probe.candidates: "b@d" is not a scheduler name`,
		`p.toml:25:1: rule 3 "z": probe.margin: 90% is outside 0%..50%`,
		`p.toml:26:1: rule 3 "z": probe.block_size: 1048577B is outside 512B..1MiB`,
		`p.toml:29:1: daemon.probe_concurrency: 0 is outside 1..64 (probes of different disks at once)`,
		`p.toml:30:1: daemon.probe_budget: "soon" is not a duration: want a number with a unit, such as "5m", or "0" for no limit`,
		`p.toml:31:18: daemon.probe_results: "etc/*.json" is not an absolute path`,
		`p.toml:31:32: daemon.probe_results: "/x/[.json" is not a valid glob: syntax error in pattern`,
	}
	got := errorLines(t, File{Name: "p.toml", Data: []byte(src)})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestParseProbeNrRequests: nr_requests candidates are "default" or a
// number, each checked at its place in the list; a good list reaches the
// probe's options.
func TestParseProbeNrRequests(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "x"
[rule.probe]
candidates = ["mq-deadline"]
nr_requests = ["default", 2, "many", 64, 64, 0, 4096]

[[rule]]
name = "y"
[rule.probe]
candidates = ["mq-deadline"]
nr_requests = 64
`
	// An nr_requests list that cannot be read leaves one scheduler to
	// compare: the candidates are reported too.
	want := []string{
		`p.toml:4:1: rule 1 "x": probe.candidates: want at least two schedulers to compare (or one, with two nr_requests), not 1`,
		`p.toml:5:30: rule 1 "x": probe.nr_requests: "many" is not an nr_requests: want "default" or a number of requests, such as 64`,
		`p.toml:5:46: rule 1 "x": probe.nr_requests: 0 is not an nr_requests: write "default" for the kernel's value`,
		`p.toml:10:1: rule 2 "y": probe.candidates: want at least two schedulers to compare (or one, with two nr_requests), not 1`,
		`p.toml:11:1: rule 2 "y": probe.nr_requests: want a list of nr_requests values, such as ["default", 64], not an integer`,
	}
	got := errorLines(t, File{Name: "p.toml", Data: []byte(src)})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	src = strings.Replace(src, `"many", 64, 64, 0, 4096]`, `64, 64, 4096]`, 1)
	want = []string{
		`p.toml:5:27: rule 1 "x": probe.nr_requests: 2 is outside 4..2048 (or "default", the kernel's value for the scheduler)`,
		`p.toml:5:34: rule 1 "x": probe.nr_requests: 64 is named twice`,
		`p.toml:5:38: rule 1 "x": probe.nr_requests: 4096 is outside 4..2048 (or "default", the kernel's value for the scheduler)`,
	}
	if got := errorLines(t, File{Name: "p.toml", Data: []byte(src)}); !slices.Equal(got[:min(len(got), 3)], want) {
		t.Errorf("errors:\n%s\nwant first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	adaptive := "[[rule]]\nname = \"x\"\n[rule.probe]\nnr_requests = [4, \"default\"]\n[rule.adapt]\n"
	if got := errorLines(t, File{Name: "a.toml", Data: []byte(adaptive)}); len(got) != 1 ||
		got[0] != `a.toml:5:1: rule 1 "x": adapt: an adaptive rule switches schedulers by one curve each, and its [rule.probe] measures nr_requests too: size nr_requests in a rule without [rule.adapt]` {
		t.Errorf("adapt with nr_requests: %q", got)
	}
	p, err := Parse(File{Name: "q.toml", Data: []byte("[[rule]]\nname = \"x\"\n[rule.probe]\ncandidates = [\"mq-deadline\"]\nnr_requests = [4, \"default\"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Rules[0].Probe().NrRequests; !slices.Equal(got, []int{4, probeopt.NrRequestsDefault}) {
		t.Errorf("nr_requests %v, want [4 default]", got)
	}
}

func TestParseMarginAndMaxAge(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]float64{"5%": 0.05, "0%": 0, " 12.5 %": 0.125, "50%": 0.5} {
		if got, err := ParseMargin(s); err != nil || got != want {
			t.Errorf("ParseMargin(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	// Its range is the options' to check (TestParseProbeErrors).
	for _, s := range []string{"5", "x%", "NaN%", "5%%"} {
		if _, err := ParseMargin(s); err == nil {
			t.Errorf("ParseMargin(%q) accepted", s)
		}
	}
	for s, want := range map[string]time.Duration{"0": 0, "30d": 720 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := ParseMaxAge(s); err != nil || got != want {
			t.Errorf("ParseMaxAge(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if n, err := ParseSize("4KiB"); err != nil || n != 4096 {
		t.Errorf("ParseSize(4KiB) = %d, %v", n, err)
	}
	if n, err := ParseSize("512"); err != nil || n != 512 {
		t.Errorf("ParseSize(512) = %d, %v", n, err)
	}
}

// TestParseProbeInFlight: depth x block size is bounded together, and the
// error points at the later of the two keys given.
func TestParseProbeInFlight(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		want string // "" when it parses
	}{
		{"depth = 64\nblock_size = \"1MiB\"\n", ""},
		{"depth = 1024\nblock_size = \"64KiB\"\n", ""},
		{"depth = 1024\n", ""},
		{"depth = 128\nblock_size = \"1MiB\"\n",
			`p.toml:5:1: rule 1 "x": probe.block_size: depth 128 x block size 1MiB is 128MiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)`},
		{"block_size = \"1MiB\"\ndepth = 1024\n",
			`p.toml:5:1: rule 1 "x": probe.depth: depth 1024 x block size 1MiB is 1GiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)`},
		{"block_size = \"4MiB\"\n",
			`p.toml:4:1: rule 1 "x": probe.block_size: 4MiB is outside 512B..1MiB`},
		{"depth = 1024\nblock_size = \"128KiB\"\n",
			`p.toml:5:1: rule 1 "x": probe.block_size: depth 1024 x block size 128KiB is 128MiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)`},
	} {
		f := File{Name: "p.toml", Data: []byte("[[rule]]\nname = \"x\"\n[rule.probe]\n" + c.body)}
		if c.want == "" {
			if _, err := Parse(f); err != nil {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		if got := errorLines(t, f); strings.Join(got, "\n") != c.want {
			t.Errorf("%q: errors\n%s\nwant\n%s", c.body, strings.Join(got, "\n"), c.want)
		}
	}
}

// TestParseProbeDepths: depths is a list of integers, checked by the
// options' one validation; a problem with one depth is reported at it,
// one with the list at the key.
func TestParseProbeDepths(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body string
		want string // "" when it parses
	}{
		{"depths = [1, 4, 16, 64, 128, 256, 512, 1024]\n", ""},
		{"depths = [8]\n", ""},
		{"depths = 4\n", `p.toml:4:1: rule 1 "x": probe.depths: want a list of depths, such as [1, 4, 16, 64], not an integer`},
		{"depths = []\n", `p.toml:4:1: rule 1 "x": probe.depths: want at least one depth, such as [1, 4, 16, 64]`},
		{"depths = [1, \"4\", 16]\n", `p.toml:4:14: rule 1 "x": probe.depths: want an integer, not a string`},
		{"depths = [1, 16, 4]\n", `p.toml:4:18: rule 1 "x": probe.depths: 4 after 16: depths ascend, each once`},
		{"depths = [1, 4, 4]\n", `p.toml:4:17: rule 1 "x": probe.depths: 4 after 4: depths ascend, each once`},
		{"depths = [0, 4096]\n", `p.toml:4:11: rule 1 "x": probe.depths: 0 is outside 1..1024` + "\n" +
			`p.toml:4:14: rule 1 "x": probe.depths: 4096 is outside 1..1024`},
		{"depths = [1, 2, 3, 4, 5, 6, 7, 8, 9]\n", `p.toml:4:1: rule 1 "x": probe.depths: 9 depths: at most 8`},
		{"depths = [1, 128]\nblock_size = \"1MiB\"\n",
			`p.toml:5:1: rule 1 "x": probe.block_size: the deepest of depths, 128 x block size 1MiB is 128MiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)`},
	} {
		f := File{Name: "p.toml", Data: []byte("[[rule]]\nname = \"x\"\n[rule.probe]\n" + c.body)}
		if c.want == "" {
			p, err := Parse(f)
			if err != nil {
				t.Errorf("%q: %v", c.body, err)
			} else if got := p.Rules[0].Probe().Depths; len(got) == 0 {
				t.Errorf("%q: depths %v", c.body, got)
			}
			continue
		}
		if got := errorLines(t, f); strings.Join(got, "\n") != c.want {
			t.Errorf("%q: errors\n%s\nwant\n%s", c.body, strings.Join(got, "\n"), c.want)
		}
	}
}
