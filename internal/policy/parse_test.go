package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseEmbedded keeps the default policy shipped in the binary valid.
func TestParseEmbedded(t *testing.T) {
	t.Parallel()
	p, err := Parse(File{Name: EmbeddedName, Data: Embedded()})
	if err != nil {
		t.Fatalf("the embedded policy is invalid:\n%v", err)
	}
	if len(p.Rules) == 0 {
		t.Fatal("the embedded policy has no rules")
	}
	want := Daemon{UeventSource: "kernel", ReconcileInterval: DefaultReconcileInterval, ProbeConcurrency: DefaultProbeConcurrency}
	if !reflect.DeepEqual(p.Daemon, want) {
		t.Errorf("Daemon = %+v, want %+v (the defaults, spelled out in default.toml)", p.Daemon, want)
	}
	if !reflect.DeepEqual(p.Sources, []string{EmbeddedName}) {
		t.Errorf("Sources = %q", p.Sources)
	}
	for _, r := range p.Rules {
		if !strings.HasPrefix(r.Source, EmbeddedName+":") {
			t.Errorf("%s: Source %q has no line", r.Label(), r.Source)
		}
	}
	// Embedded hands out a copy.
	Embedded()[0] = 'X'
	if Embedded()[0] == 'X' {
		t.Error("Embedded returns the package's own slice")
	}
}

// TestParseContrib keeps every example policy valid.
func TestParseContrib(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../contrib/policies/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d contrib policies, want the examples", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatalf("invalid:\n%v", err)
			}
			if len(p.Rules) == 0 {
				t.Error("no rules")
			}
		})
	}
}

// TestParseIssueExample parses the full example of the policy language.
func TestParseIssueExample(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `# Rules are read top to bottom.
[[rule]]
name = "virtio disks: no scheduler"   # required, unique
[rule.match]                          # every key must hold; a list means "any of"
class = ["virtio"]
name = ["vd*"]
driver = ["virtio_blk"]
transport = ["virtio_scsi"]
rotational = true
removable = false
nowait = false
hw_queues = 1                       # or { min = 2, max = 64 }
size = { min = "1GiB", max = "64TiB" }
model = "^QEMU"                     # regular expressions: model, vendor, serial
vendor = "^QEMU"
serial = "."
property = { ID_BUS = "ata" }       # udev properties, where known
[rule.except]                         # same keys: the rule does not apply when this holds
[rule.set]
scheduler = ["none", "mq-deadline"]   # a name or a list: the first one the disk offers
read_ahead_kb = 128
nr_requests = 256
nomerges = 0                          # 0..2
rq_affinity = 2                       # 0..2
add_random = 0
iostats = 0
wbt_lat_usec = 0
max_sectors_kb = 512
io_timeout = 30000
[rule.set.iosched]                    # files in queue/iosched/ of the chosen scheduler
fifo_batch = 16

[daemon]
uevent_source = "udev"
reconcile_interval = "5m"
restore_on_exit = true
`)
	if len(p.Rules) != 1 {
		t.Fatalf("%d rules", len(p.Rules))
	}
	r := p.Rules[0]
	if r.Name != "virtio disks: no scheduler" || r.Index != 1 || r.Source != "p.toml:2" {
		t.Errorf("rule = %q %d %q", r.Name, r.Index, r.Source)
	}
	if len(r.match) != 13 || len(r.except) != 1 || len(r.except[0]) != 0 {
		t.Errorf("%d match keys, except %v; want 13 and one empty table", len(r.match), r.except)
	}
	var got []string
	for _, s := range r.Settings() {
		if s.Rule != r.Name {
			t.Errorf("%s: Rule = %q", s.Attribute, s.Rule)
		}
		got = append(got, s.Attribute+"="+strings.Join(s.Values, ","))
	}
	want := []string{
		"scheduler=none,mq-deadline", "nr_requests=256", "iosched/fifo_batch=16",
		"read_ahead_kb=128", "nomerges=0", "rq_affinity=2", "add_random=0", "iostats=0",
		"wbt_lat_usec=0", "max_sectors_kb=512", "io_timeout=30000",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings\n got %q\nwant %q", got, want)
	}
	if d := (Daemon{UeventSource: "udev", ReconcileInterval: 5 * time.Minute, RestoreOnExit: true, ProbeConcurrency: 1}); !reflect.DeepEqual(p.Daemon, d) {
		t.Errorf("Daemon = %+v, want %+v", p.Daemon, d)
	}
	if p.Rule("virtio disks: no scheduler") != r || p.Rule("nope") != nil {
		t.Error("Policy.Rule does not find rules by name")
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "")
	if len(p.Rules) != 0 || p.Daemon.UeventSource != "kernel" || p.Daemon.ReconcileInterval != DefaultReconcileInterval || p.Daemon.RestoreOnExit {
		t.Errorf("empty policy = %+v", p)
	}
	if p := mustParse(t, "[daemon]\nreconcile_interval = \"0\"\n"); p.Daemon.ReconcileInterval != 0 {
		t.Errorf(`reconcile_interval = "0" gives %v, want 0 (off)`, p.Daemon.ReconcileInterval)
	}
	// A rule without set is valid: it documents a kind of disk.
	if p := mustParse(t, "[[rule]]\nname = \"doc only\"\n[rule.match]\nclass = \"zram\"\n"); len(p.Rules[0].Settings()) != 0 {
		t.Error("a rule without set has settings")
	}
}

func TestParseSeveralFiles(t *testing.T) {
	t.Parallel()
	a := File{Name: "a.toml", Data: []byte("[[rule]]\nname = \"one\"\n[rule.set]\nscheduler = \"none\"\n\n[daemon]\nuevent_source = \"udev\"\nreconcile_interval = \"10s\"\n")}
	b := File{Name: "b.toml", Data: []byte("[[rule]]\nname = \"two\"\n\n[daemon]\nreconcile_interval = \"2m\"\n")}
	p, err := Parse(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.Rules {
		got = append(got, r.Label()+" "+r.Source)
	}
	if want := []string{`rule 1 "one" a.toml:1`, `rule 2 "two" b.toml:1`}; !reflect.DeepEqual(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
	// [daemon] keys of a later file override, key by key.
	if want := (Daemon{UeventSource: "udev", ReconcileInterval: 2 * time.Minute, ProbeConcurrency: 1}); !reflect.DeepEqual(p.Daemon, want) {
		t.Errorf("Daemon = %+v, want %+v", p.Daemon, want)
	}
	if !reflect.DeepEqual(p.Sources, []string{"a.toml", "b.toml"}) {
		t.Errorf("Sources = %q", p.Sources)
	}

	// Errors from every file, in file order; names are unique across files.
	bad1 := File{Name: "10-x.toml", Data: []byte("[[rule]]\nname = \"dup\"\n[rule.set]\nnomerges = 5\n")}
	bad2 := File{Name: "20-y.toml", Data: []byte("[[rule]\n")}
	bad3 := File{Name: "30-z.toml", Data: []byte("\n[[rule]]\nname = \"dup\"\n")}
	want := []string{
		`10-x.toml:4:1: rule 1 "dup": set.nomerges: 5 is out of range 0..2`,
		`20-y.toml:1:7: expected end of table array name delimiter ']', but got '\n' instead`,
		`30-z.toml:3:1: rule 2 "dup": name: "dup" is already the name of rule 1 "dup" (10-x.toml:1)`,
	}
	if got := errorLines(t, bad1, bad2, bad3); !reflect.DeepEqual(got, want) {
		t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  Error
		want string
	}{
		{Error{File: "p.toml", Line: 3, Col: 7, Rule: `rule 2 "x"`, Key: "set.nomerges", Msg: "bad"}, `p.toml:3:7: rule 2 "x": set.nomerges: bad`},
		{Error{File: "p.toml", Line: 3, Rule: `rule 2`, Key: "name", Msg: "bad"}, `p.toml:3: rule 2: name: bad`},
		{Error{File: "p.toml", Key: "daemon", Msg: "bad"}, `p.toml: daemon: bad`},
		{Error{Line: 1, Col: 1, Msg: "bad"}, `1:1: bad`},
		{Error{Msg: "bad"}, `bad`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestErrorsAs(t *testing.T) {
	t.Parallel()
	_, err := Parse(File{Name: "p.toml", Data: []byte("[[rule]]\nname = 1\n[rule.set]\nnomerges = 9\n")})
	var ptr *Errors
	var val Errors
	var one *Error
	if !errors.As(err, &ptr) || len(*ptr) != 2 {
		t.Errorf("errors.As(*Errors) failed: %v", err)
	}
	if !errors.As(err, &val) || len(val) != 2 {
		t.Errorf("errors.As(Errors) failed: %v", err)
	}
	if !errors.As(err, &one) || one.Line != 2 || one.Key != "name" {
		t.Errorf("errors.As(*Error) = %+v", one)
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   any
		want uint64
		err  string
	}{
		{int64(4096), 4096, ""},
		{"512", 512, ""},
		{"512B", 512, ""},
		{"4K", 4 << 10, ""},
		{"4KiB", 4 << 10, ""},
		{"1 GiB", 1 << 30, ""},
		{"1g", 1 << 30, ""},
		{"64TiB", 64 << 40, ""},
		{"2P", 2 << 50, ""},
		{"16384PiB", 0, "too large"},
		{"99999999999999999999", 0, "too large"},
		{"1GB", 0, `"1GB" is ambiguous (decimal or binary?): write "1GiB"`},
		{"1.5GiB", 0, "is not a size"},
		{"GiB", 0, "is not a size"},
		{"", 0, "is not a size"},
		{int64(-1), 0, "-1 is negative"},
		{1.5, 0, "not a float"},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("parseBytes(%v) = %d, %v; want %d", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("parseBytes(%v) = %d, %v; want error containing %q", tt.in, got, err, tt.err)
		}
	}
	for n, want := range map[uint64]string{0: "0B", 1: "1B", 1024: "1KiB", 1536: "1536B", 20 << 30: "20GiB", 3 << 50: "3PiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	valid := setKeys()
	for in, want := range map[string]string{
		"readahead_kb": "read_ahead_kb", "Read_Ahead_KB": "read_ahead_kb", "nr_request": "nr_requests",
		"schedular": "scheduler", "io_sched": "iosched", "wbt_lat": "wbt_lat_usec", "x": "", "colour": "",
	} {
		got, _ := suggest(in, valid)
		if got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// The file in a test's own temporary directory, for loader tests.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
