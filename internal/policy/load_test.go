package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func rule(name string) string { return "[[rule]]\nname = \"" + name + "\"\n" }

func ruleNames(p *Policy) []string {
	var out []string
	for _, r := range p.Rules {
		out = append(out, r.Name)
	}
	return out
}

func TestLoadPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"one.toml":            rule("single"),
		"d/20-b.toml":         rule("b1") + rule("b2"),
		"d/10-a.toml":         rule("a"),
		"d/30-c.toml":         rule("c"),
		"d/.#30-c.toml":       "editor lock file, not TOML",
		"d/README":            "not a policy",
		"d/old.toml.bak":      "not a policy",
		"empty/notes.txt":     "",
		"bad/10-ok.toml":      rule("ok"),
		"bad/20-broken.toml":  rule("x") + "[rule.set]\nnomerges = 7\n",
		"nested/sub/in.toml":  rule("not read"),
		"nested/top.toml":     rule("top"),
		"tomldir/x.toml/keep": "",
	})
	l := Locations{File: filepath.Join(dir, "absent.toml"), Dir: filepath.Join(dir, "absent.d")}

	t.Run("file", func(t *testing.T) {
		p, err := l.load(filepath.Join(dir, "one.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ruleNames(p), []string{"single"}) || !reflect.DeepEqual(p.Sources, []string{filepath.Join(dir, "one.toml")}) {
			t.Errorf("rules %q from %q", ruleNames(p), p.Sources)
		}
	})
	t.Run("directory in lexical order", func(t *testing.T) {
		p, err := l.load(filepath.Join(dir, "d"))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "b1", "b2", "c"}; !reflect.DeepEqual(ruleNames(p), want) {
			t.Errorf("rules %q, want %q", ruleNames(p), want)
		}
		var idx []int
		for _, r := range p.Rules {
			idx = append(idx, r.Index)
		}
		if !reflect.DeepEqual(idx, []int{1, 2, 3, 4}) {
			t.Errorf("indices %v, want 1..4 across files", idx)
		}
		want := []string{filepath.Join(dir, "d", "10-a.toml"), filepath.Join(dir, "d", "20-b.toml"), filepath.Join(dir, "d", "30-c.toml")}
		if !reflect.DeepEqual(p.Sources, want) {
			t.Errorf("Sources %q, want %q", p.Sources, want)
		}
	})
	t.Run("subdirectories are not read", func(t *testing.T) {
		p, err := l.load(filepath.Join(dir, "nested"))
		if err != nil || !reflect.DeepEqual(ruleNames(p), []string{"top"}) {
			t.Errorf("rules %q, %v", ruleNames(p), err)
		}
	})
	t.Run("missing path", func(t *testing.T) {
		_, err := l.load(filepath.Join(dir, "nope.toml"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want ErrNotExist", err)
		}
	})
	t.Run("directory without policies", func(t *testing.T) {
		_, err := l.load(filepath.Join(dir, "empty"))
		if err == nil || !strings.Contains(err.Error(), "no *.toml files") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("a directory named *.toml is an error, not skipped", func(t *testing.T) {
		if _, err := l.load(filepath.Join(dir, "tomldir")); err == nil {
			t.Error("no error")
		}
	})
	t.Run("invalid file names itself", func(t *testing.T) {
		_, err := l.load(filepath.Join(dir, "bad"))
		var es *Errors
		if !errors.As(err, &es) {
			t.Fatalf("err = %v, want *Errors", err)
		}
		if want := filepath.Join(dir, "bad", "20-broken.toml") + `:4:1: rule 2 "x": set.nomerges: 7 is out of range 0..2`; err.Error() != want {
			t.Errorf("err = %q, want %q", err, want)
		}
	})
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	embedded, err := Parse(File{Name: EmbeddedName, Data: Embedded()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   map[string]string // under the temp dir: "policy.toml", "policy.d/..."
		rules   []string
		sources []string // relative to the temp dir, or EmbeddedName
	}{
		{"nothing: embedded", nil, ruleNames(embedded), []string{EmbeddedName}},
		{"empty policy.d: embedded", map[string]string{"policy.d/README": ""}, ruleNames(embedded), []string{EmbeddedName}},
		{"file only", map[string]string{"policy.toml": rule("main")}, []string{"main"}, []string{"policy.toml"}},
		{"directory only", map[string]string{"policy.d/b.toml": rule("b"), "policy.d/a.toml": rule("a")}, []string{"a", "b"},
			[]string{"policy.d/a.toml", "policy.d/b.toml"}},
		{"file then directory", map[string]string{"policy.toml": rule("main"), "policy.d/50-local.toml": rule("local")},
			[]string{"main", "local"}, []string{"policy.toml", "policy.d/50-local.toml"}},
		{"an empty file is a policy with no rules", map[string]string{"policy.toml": "# nothing\n"}, nil, []string{"policy.toml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			l := Locations{File: filepath.Join(dir, "policy.toml"), Dir: filepath.Join(dir, "policy.d")}
			p, err := l.load("")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ruleNames(p), tt.rules) {
				t.Errorf("rules %q, want %q", ruleNames(p), tt.rules)
			}
			var want []string
			for _, s := range tt.sources {
				if s != EmbeddedName {
					s = filepath.Join(dir, s)
				}
				want = append(want, s)
			}
			if !reflect.DeepEqual(p.Sources, want) {
				t.Errorf("Sources %q, want %q", p.Sources, want)
			}
		})
	}

	t.Run("an unreadable default is an error, not a silent fallback", func(t *testing.T) {
		dir := t.TempDir()
		// A directory where the file should be cannot be read as one.
		if err := os.Mkdir(filepath.Join(dir, "policy.toml"), 0o755); err != nil {
			t.Fatal(err)
		}
		l := Locations{File: filepath.Join(dir, "policy.toml"), Dir: filepath.Join(dir, "policy.d")}
		if p, err := l.load(""); err == nil {
			t.Errorf("loaded %q", p.Sources)
		}
	})
}

// Only regular files are policies, and none is read without bound. Before
// these checks a FIFO blocked the load (the daemon's event loop, `iosched
// check`) until someone wrote to it, and a link to /dev/zero was read until
// the process ran out of memory.
func TestLoadRefusesWhatIsNotAPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := Locations{File: filepath.Join(dir, "absent.toml"), Dir: filepath.Join(dir, "absent.d")}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{
		"d/10-ok.toml":   rule("ok"),
		"big.toml":       "# " + strings.Repeat("x", MaxFileSize) + "\n",
		"link/ok.toml":   rule("ok"),
		"many/ok.toml":   rule("ok"),
		"linked/a.toml":  rule("a"),
		"regular.toml":   rule("r"),
		"fifodir/a.toml": rule("a"),
	})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifodir", "b.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "d", "20-zero.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "regular.toml"), filepath.Join(dir, "linked", "b.toml")); err != nil {
		t.Fatal(err)
	}
	// Five files of 0.9 MiB: each under the file limit, together over the
	// policy's.
	for i := range 5 {
		writeFiles(t, dir, map[string]string{fmt.Sprintf("many/%d.toml", i): "# " + strings.Repeat("x", MaxFileSize*9/10) + "\n"})
	}
	for _, tt := range []struct{ path, want string }{
		{fifo, "not a regular file (a FIFO)"},
		{filepath.Join(dir, "fifodir"), "not a regular file (a FIFO)"},
		{filepath.Join(dir, "d"), "not a regular file (a character device)"},
		{filepath.Join(dir, "big.toml"), "larger than 1048576 bytes"},
		{filepath.Join(dir, "many"), "larger than 4194304 bytes together"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := l.load(tt.path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: err = %v, want %q", tt.path, err, tt.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the load did not return within 5 s", tt.path)
		}
	}
	// A link to a regular file is a policy file.
	if p, err := l.load(filepath.Join(dir, "linked")); err != nil || !reflect.DeepEqual(ruleNames(p), []string{"a", "r"}) {
		t.Errorf("a link to a regular file: rules %q, %v", ruleNames(p), err)
	}
}

// Files names what Load reads, and nothing else of the directories: a log
// file, an editor's file, a file not named *.toml are no part of a policy.
func TestFilesNamesOnlyThePolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"policy.d/20-b.toml":         rule("b"),
		"policy.d/10-a.toml":         rule("a"),
		"policy.d/iosched.log":       "time=... level=DEBUG",
		"policy.d/.10-a.toml.swp":    "x",
		"policy.d/README":            "x",
		"policy.d/old.toml.dpkg-old": "x",
	})
	l := Locations{File: filepath.Join(dir, "policy.toml"), Dir: filepath.Join(dir, "policy.d")}
	want := []string{l.File, filepath.Join(dir, "policy.d/10-a.toml"), filepath.Join(dir, "policy.d/20-b.toml")}
	if got, err := l.Files(""); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Files(\"\") = %q, %v; want %q (the main file named although absent)", got, err, want)
	}
	if got, err := l.Files(l.Dir); err != nil || !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("Files(dir) = %q, %v; want %q", got, err, want[1:])
	}
	p, err := l.load("")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Sources, want[1:]) {
		t.Errorf("Load read %q, want %q", p.Sources, want[1:])
	}
}
