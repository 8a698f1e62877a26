package conflicts

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// udevCase loads one rules file under a fresh root and returns the writes
// for d with the attributes in attrs (a missing key is a missing file).
func udevCase(t *testing.T, rules string, attrs map[string]string) (*Set, []Write) {
	t.Helper()
	root := t.TempDir()
	writeFile(t, root, "/etc/udev/rules.d/60-x.rules", rules)
	s := loadBounded(t, root)
	k := Known{
		Attr: func(rel string) (string, bool, error) {
			v, ok := attrs[rel]
			return v, ok, nil
		},
		Exists: func(rel string) (bool, error) {
			_, ok := attrs[rel]
			return ok, nil
		},
	}
	return s, s.ForKnown(loop, k)
}

// what is a write as the cases compare it: "LINE attr=value", with
// " may" when possible and " ?" for an unknown value.
func what(ws []Write) []string {
	var out []string
	for _, w := range ws {
		s := w.Where()[strings.LastIndexByte(w.Where(), ':')+1:] + " " + w.Attribute + "=" + w.Value
		if w.Possible {
			s += " may"
		}
		if len(w.UnknownValue) > 0 {
			s += " ?"
		}
		out = append(out, s)
	}
	return out
}

// Each kind of rule udevd 252 reads otherwise than iosched did: the
// writes it makes on loop0 (an add and a change event alike).
func TestUdevReading(t *testing.T) {
	t.Parallel()
	attrs := map[string]string{"ro": "0\n", "queue/nr_requests": "128\n"}
	for _, c := range []struct {
		name, rules string
		want        []string
	}{
		{"ATTR += and := are =", `KERNEL=="loop*", ATTR{queue/scheduler}+="bfq"
KERNEL=="loop*", ATTR{queue/read_ahead_kb}:="512"
`, []string{"1 scheduler=bfq", "2 read_ahead_kb=512"}},
		{"e-string escapes", `KERNEL=="loop*", ATTR{queue/scheduler}=e"bf\x71"
KERNEL=="loop*", ATTR{queue/iosched/x}=e"a\101\u00e9\s\\"
KERNEL=="loop*", ATTR{queue/iosched/y}="a\x71\"b"
`, []string{"1 scheduler=bfq", "2 iosched/x=aAé \\", `3 iosched/y=a\x71"b`}},
		{"substitutions", `ENV{S}="kyber"
KERNEL=="loop*", ATTR{queue/scheduler}="$env{S}"
KERNEL=="loop*", ATTR{queue/read_ahead_kb}="$env{R}", ENV{R}="384"
KERNEL=="loop*", ATTR{queue/iosched/x}="%k|%n|%p|%S|$$|%%|$attr{ro}|%s{nosuch}|$env{UNSET}|%c|$foo|%N"
`, []string{"2 scheduler=kyber", "3 read_ahead_kb=384", "4 iosched/x=loop0|0|/devices/virtual/block/loop0|/sys|$|%|0||||$foo|/dev/loop0"}},
		{"a value no rule can know", `KERNEL=="loop*", IMPORT{program}="/bin/probe"
KERNEL=="loop*", ATTR{queue/scheduler}="$env{ID_SCHED}"
`, []string{"2 scheduler=$env{ID_SCHED} ?"}},
		{"a GOTO behind an undecidable TEST is followed both ways", `TEST=="/run/flag", GOTO="mq"
KERNEL=="loop*", ATTR{queue/scheduler}="mq-deadline"
GOTO="end"
LABEL="mq"
ATTR{queue/scheduler}="bfq"
LABEL="end"
ATTR{queue/read_ahead_kb}="256"
`, []string{"2 scheduler=mq-deadline may", "5 scheduler=bfq may", "7 read_ahead_kb=256"}},
		{"a TEST of the disk's own directory is decided", `TEST=="%S%p/queue/nr_requests", GOTO="have"
ATTR{queue/scheduler}="none"
LABEL="have"
TEST!="queue/nosuch", ATTR{queue/scheduler}="bfq"
TEST=="/sys/block/%k/queue/nr_requests", TEST!="/sys/class/block/%k/queue/nosuch", ATTR{queue/read_ahead_kb}="8"
`, []string{"4 scheduler=bfq", "5 read_ahead_kb=8"}},
		{"a property set only on one way", `PROGRAM=="/bin/true", ENV{S}="bfq"
ATTR{queue/scheduler}="$env{S}"
`, []string{"2 scheduler=bfq may", "2 scheduler= may"}},
		{"rules udevd 252 refuses write nothing", `BUS=="x", ATTR{queue/scheduler}="a"
KERNEL=="loop*", ATTR{queue/scheduler}=i"b"
KERNEL=="loop*", WAIT_FOR=="x", ATTR{queue/scheduler}="c"
KERNEL=="loop*", ATTR{queue/scheduler}-="d"
KERNEL=="loop*", ATTR{queue/scheduler}=e"\q"
KERNEL=="loop*", ENV{DEVTYPE}="x", ATTR{queue/scheduler}="e"
KERNEL=="loop*", ATTR{queue/scheduler}="` + strings.Repeat("1", 600) + `"
KERNEL=="loop*", ATTR{queue/scheduler}="ok"
`, []string{"8 scheduler=ok"}},
		{"a 16 KiB line ends the file", `ATTR{queue/scheduler}="before"
ATTR{queue/iosched/x}="` + strings.Repeat("1", udevLineSize) + `"
ATTR{queue/scheduler}="after"
`, []string{"1 scheduler=before"}},
		{"links and tags are those the event added", `SYMLINK=="?*", ATTR{queue/read_ahead_kb}="136"
SYMLINK=="disk/*", ATTR{queue/read_ahead_kb}="144"
TAG=="systemd", ATTR{queue/nr_requests}="48"
SYMLINK+="x"
SYMLINK=="x", ATTR{queue/nr_requests}="96"
`, []string{"1 read_ahead_kb=136", "5 nr_requests=96 may"}},
		{"a built-in sets only its own properties", `IMPORT{builtin}="path_id"
ENV{ID_VENDOR}!="?*", ATTR{queue/scheduler}="mq-deadline"
ENV{ID_PATH}=="?*", ATTR{queue/read_ahead_kb}="1"
`, []string{"2 scheduler=mq-deadline", "3 read_ahead_kb=1 may"}},
		{"a scheduler switch replaces its files and resets nr_requests", `TEST=="queue/iosched", ATTR{queue/read_ahead_kb}="1"
ATTR{queue/nr_requests}=="128", ATTR{queue/read_ahead_kb}="2"
ATTR{queue/scheduler}="bfq"
TEST=="queue/iosched/low_latency", ATTR{queue/read_ahead_kb}="3"
ATTR{queue/nr_requests}=="128", ATTR{queue/read_ahead_kb}="4"
`, []string{"2 read_ahead_kb=2", "3 scheduler=bfq", "4 read_ahead_kb=3 may", "5 read_ahead_kb=4 may"}},
		{"NAME names no disk", `NAME=="loop*", ATTR{queue/scheduler}="a"
NAME=="", ATTR{queue/scheduler}="b"
`, []string{"2 scheduler=b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, ws := udevCase(t, c.rules, attrs)
			if got := what(ws); !reflect.DeepEqual(got, c.want) {
				t.Errorf("writes\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// The rules udevd refuses are reported with udevd's own reason, at the
// line it names.
func TestUdevRejections(t *testing.T) {
	t.Parallel()
	s, _ := udevCase(t, `BUS=="x", ATTR{queue/scheduler}="a"
KERNEL=="loop*", ATTR{queue/scheduler}=i"b"
KERNEL=="loop*", ATTR{queue/scheduler}-="d"
KERNEL{x}=="loop*"
ENV{DEVTYPE}="x"
IMPORT{builtin}="nosuch"
TEST{9}=="x", ATTR{queue/scheduler}="a"
NAME="%k"
OPTIONS="log_level=loud"
KERNEL=="loop*", \
 ATTR{queue/iosched/x}="`+strings.Repeat("1", 9000)+`\
`+strings.Repeat("1", 9000)+`"
OPTIONS="nosuch", ATTR{queue/scheduler}="kept"
`, nil)
	want := []string{
		"1 Invalid key 'BUS'",
		"2 Invalid key/value pair, ignoring.",
		"3 Invalid operator for ATTR.",
		"4 Invalid attribute for KERNEL.",
		"5 Invalid ENV attribute. 'DEVTYPE' cannot be set.",
		"6 Unknown builtin command: nosuch",
		"7 Failed to parse mode '9': Invalid argument",
		`8 Ignoring NAME="%k", as it will take no effect.`,
		"9 Failed to parse log level 'loud': Invalid argument",
		"12 Line is too long, ignored",
	}
	var got []string
	for _, r := range s.Rejected {
		got = append(got, strconv.Itoa(r.Line)+" "+r.Reason)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rejected\n got %q\nwant %q", got, want)
	}
	if len(s.Problems) != len(want) || !strings.Contains(s.Problems[0], "60-x.rules:1: Invalid key 'BUS' (udevd 252 ignores this rule)") {
		t.Errorf("problems = %q", s.Problems)
	}
}

// The version of udevd is read from its binary under the root; rules are
// read as 252 reads them, and a note says so when udevd is another
// version or is not found.
func TestUdevdVersion(t *testing.T) {
	t.Parallel()
	rules := `ATTR{queue/scheduler}="bfq"` + "\n"
	for _, c := range []struct {
		binary, want, note string
	}{
		{"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x3e\x00...Starting systemd-udevd version 252.39-1~deb12u2\x00...", "252.39-1~deb12u2", ""},
		{"\x7fELF...Starting systemd-udevd version 256.7\x00", "256.7", "systemd-udevd here is 256.7: udev rules read as systemd-udevd 252 reads them"},
		{"", "", "no systemd-udevd found to tell its version: udev rules read as systemd-udevd 252 reads them"},
	} {
		root := t.TempDir()
		writeFile(t, root, "/usr/lib/udev/rules.d/60-x.rules", rules)
		if c.binary != "" {
			writeFile(t, root, "/usr/bin/udevadm", c.binary)
		}
		s := loadBounded(t, root)
		if s.Udevd != c.want {
			t.Errorf("Udevd = %q, want %q", s.Udevd, c.want)
		}
		var notes []string
		if c.note != "" {
			notes = []string{c.note}
		}
		if !reflect.DeepEqual(s.Notes, notes) {
			t.Errorf("%s: Notes = %q, want %q", c.want, s.Notes, notes)
		}
	}
}

// CONST{arch} is the architecture the udevd under the root is built for;
// CONST{virt} is not known here.
func TestUdevConst(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, root, "/usr/lib/udev/rules.d/60-x.rules", `CONST{arch}=="x86-64", ATTR{queue/scheduler}="a"
CONST{arch}=="arm64", ATTR{queue/scheduler}="b"
CONST{virt}=="kvm", ATTR{queue/scheduler}="c"
`)
	// An x86-64 ELF header (class 64, little-endian, e_machine 62).
	writeFile(t, root, "/usr/bin/udevadm", "\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x3e\x00 Starting systemd-udevd version 252.1\x00")
	s := loadBounded(t, root)
	if got, want := what(s.For(loop)), []string{"1 scheduler=a", "3 scheduler=c may"}; !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}

// A possible write says so in its words, and a write of an unknown value
// is taken to undo any setting.
func TestPossibleWriteWording(t *testing.T) {
	t.Parallel()
	_, ws := udevCase(t, `PROGRAM=="/bin/x", ATTR{queue/scheduler}="bfq"
IMPORT{program}="/bin/y"
ATTR{queue/nr_requests}="$env{N}"
`, nil)
	if len(ws) != 2 {
		t.Fatalf("writes: %q", what(ws))
	}
	if got, want := ws[0].Describe(), `udev rule /etc/udev/rules.d/60-x.rules:1 may write scheduler to "bfq" on add and change events if PROGRAM=="/bin/x" (not known here)`; got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
	if got, want := ws[1].Describe(), `udev rule /etc/udev/rules.d/60-x.rules:3 sets nr_requests to "$env{N}" on add and change events (an unknown value: $env{N} not known here)`; got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
	if !ws[1].Overrides("64") {
		t.Error("a write of an unknown value does not override 64")
	}
}

// Conditions iosched cannot decide in front of GOTOs double the paths
// followed; past the bound (fewer paths for a longer file) the rest of a
// path is followed one way, and what it writes is kept, as possible.
func TestUndecidedGotosAreBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	const n = 20000
	for i := range n {
		fmt.Fprintf(&b, "PROGRAM==\"/bin/p%d\", GOTO=\"l%d\"\nLABEL=\"l%d\"\n", i, i, i)
	}
	b.WriteString(`ATTR{queue/scheduler}="bfq"` + "\n")
	root := t.TempDir()
	writeFile(t, root, "/etc/udev/rules.d/60-x.rules", b.String())
	s := loadBounded(t, root)
	ws := s.For(loop)
	// Every GOTO leads to the next line: both ways meet, the write is
	// made on each path followed, and on the paths past the bound too.
	if got := what(ws); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprint(2*n+1)+" scheduler=bfq") {
		t.Errorf("writes %q", got)
	}
}

// A possible tuned setting is worded as one too.
func TestPossibleTunedWording(t *testing.T) {
	t.Parallel()
	w := Write{Kind: TunedProfile, Profile: "p", File: "/usr/lib/tuned/p/tuned.conf", Line: 3, Attribute: "scheduler", Value: "bfq",
		Possible: true, Unknown: []string{"tuned would evaluate ${f:virt_check} here"}}
	if got, want := w.Describe(), `tuned profile "p" (/usr/lib/tuned/p/tuned.conf:3) may set scheduler to "bfq" if tuned would evaluate ${f:virt_check} here (not known here)`; got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
}
