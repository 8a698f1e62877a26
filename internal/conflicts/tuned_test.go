package conflicts

import (
	"reflect"
	"strings"
	"testing"
)

// tuned.conf is read as Python's configparser reads it for tuned: a '#'
// after a tab starts a comment as after a space, an indented line
// continues the value above it, a repeated key takes the later value at
// its first place and a repeated section adds to the first. Before, a
// tab-separated comment was part of the value and a continuation line
// was dropped.
func TestParseTunedConf(t *testing.T) {
	t.Parallel()
	text := "# head\n[disk]\ndevices = vda,sda\nelevator=bfq\t# why\nreadahead=4096#kept\n  ; indented comment\n\n[b]\nx=1\n   2\n[disk]\nelevator = none\n"
	secs, err := parseTunedConf("/f", text, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	type kv struct {
		key, value string
		line       int
	}
	var got [][]kv
	for _, s := range secs {
		var row []kv
		for _, k := range s.keys {
			row = append(row, kv{k, s.opts[k].value, s.opts[k].line})
		}
		got = append(got, row)
	}
	want := [][]kv{
		{{"devices", "vda,sda", 3}, {"elevator", "none", 12}, {"readahead", "4096#kept", 5}},
		{{"x", "1\n2", 9}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed:\n got %+v\nwant %+v", got, want)
	}
	for text, wantErr := range map[string]string{
		"elevator=bfq\n":         "/f:1: a line before any [section]",
		"[disk]\nelevator bfq\n": `/f:2: "elevator bfq"`,
		"[disk]\n=bfq\n":         `/f:2: "=bfq"`,
	} {
		if _, err := parseTunedConf("/f", text, false, 1); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: error %v, want one naming %s", text, err, wantErr)
		}
	}
	// A variables file may hold a key without a value: it is no variable.
	secs, err = parseTunedConf("/v", "[variables]\nflag\na=1\n", true, 0)
	if err != nil || len(secs) != 1 || !reflect.DeepEqual(secs[0].keys, []string{"a"}) {
		t.Errorf("variables file: %v %+v", err, secs)
	}
}

// Variables and functions expand as tuned's do: one pass over ${NAME},
// \${NAME} kept (one backslash less), functions innermost first, s2kb
// rounding halves to even as Python's round does, a function with the
// wrong number of arguments or an unknown name left as written, a
// function that reads the machine left as written with a note, and a
// failed assertion refusing the profile.
func TestTunedVarsExpand(t *testing.T) {
	t.Parallel()
	at := tunedOption{file: "/p", line: 7}
	v := &tunedVars{}
	for _, d := range [][2]string{{"ra", "2048"}, {"twice", "${f:kb2s:${ra}}"}, {"lit", `\${ra}`}} {
		if err := v.add(d[0], tunedOption{value: d[1], file: "/p", line: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{
		"${ra} s":             "2048 s",
		"${twice}":            "4096",
		"${lit}":              "${ra}",
		`\${ra}`:              "${ra}",
		"${undefined}":        "${undefined}",
		"${f:s2kb:4097}":      "2048",
		"${f:s2kb:4099}":      "2050",
		"${f:s2kb:x}":         "${f:s2kb:x}",
		"${f:strip:  none  }": "none",
		"${f:regex_search_ternary:mq-deadline:^mq-:y:n}": "y",
		"${f:kb2s:1:2}": "${f:kb2s:1:2}",
		"${f:nosuch:1}": "${f:nosuch:1}",
		`\${f:kb2s:1}`:  "${f:kb2s:1}",
		"a}b":           "a}b",
	} {
		got, err := v.expand(in, at)
		if err != nil || got.s != want || len(got.notes) != 0 {
			t.Errorf("expand(%q) = %q, %q, %v; want %q", in, got.s, got.notes, err, want)
		}
	}
	got, err := v.expand("${f:exec:cat:/x}", at)
	if err != nil || got.s != "${f:exec:cat:/x}" || len(got.notes) != 1 || !strings.Contains(got.notes[0], "tuned would evaluate ${f:exec} at /p:7") {
		t.Errorf("exec: %q %q %v", got.s, got.notes, err)
	}
	if _, err := v.expand("${f:assertion:cores set:${ra}:1}", at); err == nil || !strings.Contains(err.Error(), "/p:7: tuned's ${f:assertion}") {
		t.Errorf("failed assertion: %v", err)
	}
	if _, err := v.expand("${f:assertion_non_equal:cores set:${ra}:1}", at); err != nil {
		t.Errorf("assertion that holds: %v", err)
	}
	for vm, want := range map[bool]string{true: "a", false: "b"} {
		w := &tunedVars{vm: vm}
		got, err := w.expand("${f:virt_check:a:b}", at)
		if err != nil || got.s != want || w.virtSeen != "${f:virt_check:a:b} at /p:7" {
			t.Errorf("virt_check, vm %v: %q %q %v", vm, got.s, w.virtSeen, err)
		}
	}
}

// What makes tuned apply no profile at all is a problem, and no tuned
// write is named: a profile_mode of auto (tuned's recommender picks),
// two post-loaded names, a profile that does not exist or is included
// without '-' and missing, a file configparser refuses, a failed
// assertion. A conditional include of a missing profile is skipped.
func TestTunedLoadRefusals(t *testing.T) {
	t.Parallel()
	const conf = "/usr/lib/tuned/x/tuned.conf"
	for name, c := range map[string]struct {
		files map[string]string
		want  string // in a problem; "" none and bfq on vda
	}{
		"auto":            {map[string]string{tunedProfileMode: "auto\n"}, "if tuned runs, it applies the profile its recommend.d rules pick"},
		"no profile":      {map[string]string{TunedActiveProfile: "\n"}, "if tuned runs, it applies the profile its recommend.d rules pick"},
		"manual, none":    {map[string]string{TunedActiveProfile: "", tunedProfileMode: "manual\n", TunedPostLoadedProfile: "x\n"}, ""},
		"bad mode":        {map[string]string{tunedProfileMode: "sometimes\n"}, "is neither auto nor manual"},
		"two post-loaded": {map[string]string{TunedPostLoadedProfile: "x y\n"}, "names more than one profile"},
		"missing post":    {map[string]string{TunedPostLoadedProfile: "y\n"}, `tuned profile "y": no y/tuned.conf`},
		"missing include": {map[string]string{conf: "[main]\ninclude=nothere\n[disk]\nelevator=bfq\n"}, `tuned profile "nothere": no nothere/tuned.conf in /etc/tuned, /usr/lib/tuned, so tuned applies no profile (included from /usr/lib/tuned/x/tuned.conf:2)`},
		"conditional":     {map[string]string{conf: "[main]\ninclude=-nothere\n[disk]\nelevator=bfq\n"}, ""},
		"unparsable":      {map[string]string{conf: "[disk]\nelevator=bfq\nnonsense\n"}, "/usr/lib/tuned/x/tuned.conf:3"},
		"assertion":       {map[string]string{conf: "[variables]\na=${f:assertion:set:1:2}\n[disk]\nelevator=bfq\n"}, "tuned's ${f:assertion} \"set\" fails"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			writeFile(t, root, TunedActiveProfile, "x\n")
			writeFile(t, root, conf, "[disk]\nelevator=bfq\n")
			for f, text := range c.files {
				writeFile(t, root, f, text)
			}
			s := loadBounded(t, root)
			ws := s.For(vda)
			if c.want == "" {
				if len(s.Problems) != 0 || len(ws) != 1 || ws[0].Value != "bfq" {
					t.Errorf("problems %q, writes %+v; want none and bfq", s.Problems, ws)
				}
				return
			}
			if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], c.want) {
				t.Errorf("problems = %q, want one saying %s", s.Problems, c.want)
			}
			if len(ws) != 0 {
				t.Errorf("tuned applies nothing, yet: %+v", ws)
			}
		})
	}
}

// A write only one way of ${f:virt_check} makes says which, and how tuned
// decides; a write both ways make says nothing of it. Before, the
// include was dropped without a word.
func TestTunedVirtCheckDescribe(t *testing.T) {
	t.Parallel()
	s, err := Load("testdata/tuned-oracle/virt-check")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range s.For(vda) {
		got = append(got, w.Describe())
	}
	cond := func(not string) string {
		return " if the machine is " + not + "a virtual machine (tuned would evaluate ${f:virt_check:cluster-vm:cluster-hw} at /etc/tuned/cluster/tuned.conf:2 by running virt-what; both branches are reported) (not known here)"
	}
	want := []string{
		`tuned profile "cluster" (/etc/tuned/cluster-hw/tuned.conf:5) sets scheduler to "bfq"` + cond("not "),
		`tuned profile "cluster" (/etc/tuned/cluster-vm/tuned.conf:5) sets scheduler to "none"` + cond(""),
		`tuned profile "cluster" (/etc/tuned/cluster/tuned.conf:5) sets read_ahead_kb to 2048 when it is lower`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Describe:\n got %q\nwant %q", got, want)
	}
}

// A profile directory whose name tuned's loader does not accept is known
// (tuned does not refuse the list) but not loaded, and not in the merged
// profile's name. Before, the name was kept in Write.Profile.
func TestTunedUnsafeProfileName(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, root, TunedActiveProfile, "x a+b\n")
	writeFile(t, root, "/usr/lib/tuned/x/tuned.conf", "[disk]\nelevator=bfq\n")
	writeFile(t, root, "/usr/lib/tuned/a+b/tuned.conf", "[disk]\nelevator=none\n")
	s := loadBounded(t, root)
	ws := s.For(vda)
	if len(s.Problems) != 0 || len(ws) != 1 || ws[0].Profile != "x" || ws[0].Value != "bfq" {
		t.Errorf("problems %q, writes %+v; want bfq from profile \"x\"", s.Problems, ws)
	}
}

// An instance whose claim on a disk cannot be told here (its
// devices_udev_regex needs udev's database) makes the instances after it
// conditional: they apply only if it does not take the disk. One whose
// devices= takes the disk ends the walk.
func TestTunedClaimNotKnown(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, root, TunedActiveProfile, "x\n")
	const conf = "/usr/lib/tuned/x/tuned.conf"
	writeFile(t, root, conf, `[by_model]
type=disk
devices_udev_regex=ID_MODEL=QEMU.*
elevator=none

[all]
type=disk
elevator=bfq

[never]
type=disk
devices=vda
elevator=kyber
`)
	s := loadBounded(t, root)
	got := briefs(s.ForKnown(vda, Known{Attr: func(string) (string, bool, error) { return "0", true, nil }}))
	want := []brief{
		{conf + ":4", "scheduler", "none", "", "devices_udev_regex=ID_MODEL=QEMU.*"},
		{conf + ":8", "scheduler", "bfq", "", "tuned's [by_model] instance, ahead of it, does not take the disk"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ForKnown:\n got %q\nwant %q", got, want)
	}
}
