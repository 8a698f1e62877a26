package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/cli"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
)

var testDate = time.Date(2024, time.March, 5, 0, 0, 0, 0, time.UTC)

// generate writes the pages of a fresh command tree into a temporary
// directory, with a version and date the test can look for.
func generate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root := cli.NewRoot(io.Discard, io.Discard)
	root.Version = "v9.8.7-test"
	if err := Generate(root, dir, testDate); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return dir
}

// wantPages names the section 1 page of every command a user can run, from
// a tree of its own (Generate changes the one it is given).
func wantPages(t *testing.T) []string {
	t.Helper()
	var pages []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			return
		}
		pages = append(pages, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := cli.NewRoot(io.Discard, io.Discard)
	pages = append(pages, "iosched.1")
	for _, c := range root.Commands() {
		walk(c)
	}
	sort.Strings(pages)
	// A walk that found nothing would make the comparison below vacuous.
	for _, must := range []string{"iosched-apply.1", "iosched-daemon.1", "iosched-default-policy.1", "iosched-status.1"} {
		if !slices.Contains(pages, must) {
			t.Fatalf("the command tree has no %s (found %v)", must, pages)
		}
	}
	return pages
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestEveryCommandHasAPage(t *testing.T) {
	t.Parallel()
	dir := generate(t)
	want := wantPages(t)
	got := listDir(t, filepath.Join(dir, "man1"))
	if !slices.Equal(got, want) {
		t.Fatalf("man1 holds %v, want one page per command: %v", got, want)
	}
	for _, name := range want {
		page, err := os.ReadFile(filepath.Join(dir, "man1", name))
		if err != nil {
			t.Fatal(err)
		}
		title := strings.ToUpper(strings.TrimSuffix(name, ".1"))
		th := `.TH "` + title + `" "1" "Mar 2024" "iosched v9.8.7-test" "iosched Manual"`
		if !bytes.Contains(page, []byte(th+"\n")) {
			t.Errorf("%s: no header line %s", name, th)
		}
		// whatis(1) and apropos(1) read the NAME line.
		if !regexp.MustCompile(`(?m)^\.SH NAME\n` + regexp.QuoteMeta(strings.TrimSuffix(name, ".1")) + ` \\?- \S`).Match(page) {
			t.Errorf("%s: no NAME line for the command", name)
		}
		if bytes.Contains(page, []byte("Auto generated")) {
			t.Errorf("%s: has cobra's generated-by line", name)
		}
	}
	root, _ := os.ReadFile(filepath.Join(dir, "man1", "iosched.1"))
	if !bytes.Contains(root, []byte(`\fBiosched-policy\fP(5)`)) {
		t.Errorf("iosched(1) does not point to iosched-policy(5)")
	}
}

func TestPolicyPage(t *testing.T) {
	t.Parallel()
	dir := generate(t)
	if got := listDir(t, filepath.Join(dir, "man5")); !slices.Equal(got, []string{"iosched-policy.5"}) {
		t.Fatalf("man5 holds %v, want [iosched-policy.5]", got)
	}
	page, err := os.ReadFile(filepath.Join(dir, "man5", "iosched-policy.5"))
	if err != nil {
		t.Fatal(err)
	}
	th := `.TH "IOSCHED-POLICY" "5" "Mar 2024" "iosched v9.8.7-test" "iosched Manual"` + "\n"
	if !bytes.Contains(page, []byte(th)) {
		t.Errorf("no header line %q in:\n%s", th, page[:min(len(page), 300)])
	}
	for _, section := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "SEE ALSO"} {
		if !bytes.Contains(page, []byte(".SH "+section+"\n")) {
			t.Errorf("no %s section", section)
		}
	}
}

// The examples in the page are parsed as policies, so they cannot rot.
func TestPolicyPageExamplesParse(t *testing.T) {
	t.Parallel()
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(mustPolicyMarkdown(t), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d ```toml examples, want at least 3", len(blocks))
	}
	for i, b := range blocks {
		if _, err := policy.Parse(policy.File{Name: "example", Data: b[1]}); err != nil {
			t.Errorf("example %d does not parse: %v\n%s", i+1, err, b[1])
		}
	}
}

// validKeys asks the parser which keys a table takes: an unknown key's error
// lists them.
func validKeys(t *testing.T, doc string) []string {
	t.Helper()
	_, err := policy.Parse(policy.File{Name: "probe", Data: []byte(doc)})
	var errs *policy.Errors
	if !errors.As(err, &errs) || len(*errs) != 1 {
		t.Fatalf("want one error for the unknown key, got %v", err)
	}
	m := regexp.MustCompile(`\(valid: ([^)]*)\)`).FindStringSubmatch((*errs)[0].Msg)
	if m == nil {
		t.Fatalf("the parser's message no longer lists the valid keys, update this test: %q", (*errs)[0].Msg)
	}
	return strings.Split(m[1], ", ")
}

// Every key the parser accepts is described in the page, so a key added to
// the language without documentation fails here.
func TestPolicyPageDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	const unknown = "zzzzzzzzzzzz = 1\n"
	tables := map[string]string{
		"[[rule]]":     "[[rule]]\nname = \"r\"\n" + unknown,
		"[rule.match]": "[[rule]]\nname = \"r\"\n[rule.match]\n" + unknown,
		"[rule.set]":   "[[rule]]\nname = \"r\"\n[rule.set]\n" + unknown,
		"[rule.adapt]": "[[rule]]\nname = \"r\"\n[rule.probe]\n[rule.adapt]\n" + unknown,
		"[daemon]":     "[daemon]\n" + unknown,
	}
	md := string(mustPolicyMarkdown(t))
	for table, doc := range tables {
		keys := validKeys(t, doc)
		for _, k := range keys {
			// A key is described in bold, or as a table of its own.
			if !strings.Contains(md, "**"+k+"**") && !strings.Contains(md, "[rule."+k+"]") && !strings.Contains(md, "[rule.set."+k+"]") {
				t.Errorf("%s key %q is not described in iosched-policy.5.md", table, k)
			}
		}
	}
	for _, c := range sysfs.Classes {
		if !strings.Contains(md, "**"+string(c)+"**") {
			t.Errorf("class %q is not listed in iosched-policy.5.md", c)
		}
	}
	for _, e := range probeopt.EngineNames() {
		if !strings.Contains(md, `**"`+e+`"**`) {
			t.Errorf("probe engine %q is not listed in iosched-policy.5.md", e)
		}
	}
	for _, spec := range sysfs.Attributes() {
		switch {
		case spec.Kind != sysfs.KindTunable:
		case spec.Refused != "":
			if !strings.Contains(md, "**"+string(spec.Attr)+"** cannot be set") {
				t.Errorf("refused tunable %q: iosched-policy.5.md does not say it cannot be set", spec.Attr)
			}
		case !strings.Contains(md, "**"+string(spec.Attr)+"** = *N*"):
			t.Errorf("tunable %q has no entry in iosched-policy.5.md", spec.Attr)
		}
	}
}

// The list of match keys is the policy package's, in its order, each entry
// once.
func TestPolicyPageMatchKeysFromTable(t *testing.T) {
	t.Parallel()
	md := string(mustPolicyMarkdown(t))
	if strings.Contains(md, strings.TrimSpace(matchKeysMark)) {
		t.Error("the mark is still in the page")
	}
	last := -1
	for _, k := range policy.MatchKeyDocs() {
		entry := "**" + k.Key + "** = " + k.Syntax + "\n:   " + k.Doc + "\n"
		i := strings.Index(md, entry)
		if i < 0 || strings.Count(md, entry) != 1 {
			t.Errorf("match key %s: its entry is not in the page once", k.Key)
			continue
		}
		if i < last {
			t.Errorf("match key %s: out of the table's order", k.Key)
		}
		last = i
	}
}

func mustPolicyMarkdown(t *testing.T) []byte {
	t.Helper()
	md, err := policyMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// groff reports roff it cannot read (a line of the source that starts with a
// dot, a broken escape); the pages must have none.
func TestPagesRenderWithoutWarnings(t *testing.T) {
	t.Parallel()
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff not installed")
	}
	dir := generate(t)
	pages, _ := filepath.Glob(filepath.Join(dir, "man[15]", "*"))
	for _, p := range pages {
		var stderr bytes.Buffer
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", p)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("groff %s: %v\n%s", filepath.Base(p), err, stderr.Bytes())
		}
	}
}

// iosched fleet's page is the fleet program's own command, its options
// and exit codes, not the stub iosched runs it through.
func TestFleetPageIsTheProgram(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(generate(t), "man1", "iosched-fleet.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--export-seeds FILE", "--min-machines", "Exit status: 0 when at least one key has data"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("iosched-fleet.1 lacks %q:\n%s", want, b)
		}
	}
}
