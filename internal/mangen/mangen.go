package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/iosched/iosched/internal/fleetcli"
	"github.com/iosched/iosched/internal/policy"
)

// policySource is the source of iosched-policy(5), without its title line
// (Generate adds it, with the same version and date as the command pages)
// and without the list of match keys, which policyMarkdown fills in from
// the policy package's table at matchKeysMark.
//
//go:embed iosched-policy.5.md
var policySource []byte

const matchKeysMark = "<!-- match keys: generated from the policy package's table -->\n"

// policyMarkdown is the policy page's markdown, the match keys filled in.
func policyMarkdown() ([]byte, error) {
	var keys bytes.Buffer
	for i, k := range policy.MatchKeyDocs() {
		if i > 0 {
			keys.WriteString("\n")
		}
		fmt.Fprintf(&keys, "**%s** = %s\n:   %s\n", k.Key, k.Syntax, k.Doc)
	}
	if bytes.Count(policySource, []byte(matchKeysMark)) != 1 {
		return nil, fmt.Errorf("iosched-policy.5.md: want the line %q once", strings.TrimSpace(matchKeysMark))
	}
	return bytes.Replace(policySource, []byte(matchKeysMark), keys.Bytes(), 1), nil
}

// Generate writes a page for root and each of its available commands into
// dir/man1 (iosched.1, iosched-list.1, ...) and iosched-policy(5) into
// dir/man5. root is changed: the pages name their version and date instead
// of cobra's "Auto generated" line, and the root page points to the policy
// page.
func Generate(root *cobra.Command, dir string, date time.Time) error {
	man1, man5 := filepath.Join(dir, "man1"), filepath.Join(dir, "man5")
	for _, d := range []string{man1, man5} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	source := "iosched " + root.Version
	// iosched fleet runs a program of its own (cli.FleetProgram): its
	// page is that program's command, options and all.
	for _, c := range root.Commands() {
		if c.Name() == "fleet" {
			root.RemoveCommand(c)
			root.AddCommand(fleetcli.NewCommand(io.Discard, io.Discard))
		}
	}
	// Inherited by every command: the history line would only repeat the
	// header's date.
	root.DisableAutoGenTag = true
	// cobra's SEE ALSO lists only parent and subcommands.
	root.Long += "\n\nThe policy language, the files it is read from and their order are described in **iosched-policy**(5)."
	header := &doc.GenManHeader{Section: "1", Date: &date, Source: source, Manual: "iosched Manual"}
	if err := doc.GenManTree(root, header, man1); err != nil {
		return fmt.Errorf("section 1 pages: %w", err)
	}
	md, err := policyMarkdown()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(man5, "iosched-policy.5"), renderPolicyPage(md, date, source), 0o644); err != nil {
		return fmt.Errorf("iosched-policy(5): %w", err)
	}
	return nil
}

// renderPolicyPage converts the page's markdown to roff, with a title block
// in the form cobra writes for the command pages.
func renderPolicyPage(md []byte, date time.Time, source string) []byte {
	title := fmt.Sprintf("%% \"IOSCHED-POLICY\" \"5\" %q %q \"iosched Manual\"\n", date.Format("Jan 2006"), source)
	return md2man.Render(append([]byte(title), md...))
}
