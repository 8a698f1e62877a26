package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
)

func newCheckCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the policy; warn about rules that match no present disk",
		Long: `check validates the policy (--policy, or the default locations, or the
embedded default). Valid: exit 0 and a one-line summary. Invalid: exit 1 and
every error on stderr as FILE:LINE:COL: rule N "name": key: message.
The seeded probe results ([daemon] probe_results) are read and checked too:
a file that cannot be read or decoded, or a result the daemon would not use,
is an error naming the file and the result.

When the sysfs tree (--sysfs, default /sys) can be read, it also warns about
rules that match no disk present there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, perr := policy.Load(e.policy)
			var errs policy.Errors
			if perr != nil && !errors.As(perr, &errs) {
				errs = policy.Errors{{Msg: perr.Error()}}
			}
			var warnings []string
			if perr == nil {
				// The seeded probe results are read as the daemon
				// reads them: a file it could not read, or a result
				// it would not use, is an error of the policy's.
				for _, se := range probe.SplitErrors(probe.NewSeeds(p.Daemon.ProbeResults).Err()) {
					errs = append(errs, &policy.Error{Key: "probe_results", Msg: strings.TrimPrefix(se.Error(), "seeded probe results: ")})
				}
				if len(errs) > 0 {
					perr = errs
				}
			}
			if perr == nil {
				warnings = e.checkAgainstDisks(p)
			}
			if asJSON {
				type errJSON struct {
					File    string `json:"file,omitempty"`
					Line    int    `json:"line,omitempty"`
					Col     int    `json:"col,omitempty"`
					Rule    string `json:"rule,omitempty"`
					Key     string `json:"key,omitempty"`
					Message string `json:"message"`
					Text    string `json:"text"`
				}
				out := struct {
					Valid    bool      `json:"valid"`
					Sources  []string  `json:"sources"`
					Rules    int       `json:"rules"`
					Errors   []errJSON `json:"errors"`
					Warnings []string  `json:"warnings"`
				}{Valid: perr == nil, Sources: []string{}, Errors: []errJSON{}, Warnings: append([]string{}, warnings...)}
				if p != nil {
					out.Sources, out.Rules = p.Sources, len(p.Rules)
				}
				for _, pe := range errs {
					out.Errors = append(out.Errors, errJSON{pe.File, pe.Line, pe.Col, pe.Rule, pe.Key, pe.Msg, pe.Error()})
				}
				if err := writeJSON(e.stdout, out); err != nil {
					return err
				}
				if perr != nil {
					return &ExitError{Code: 1}
				}
				return nil
			}
			if perr != nil {
				for _, pe := range errs {
					fmt.Fprintln(e.stderr, pe.Error())
				}
				return &ExitError{Code: 1, Msg: fmt.Sprintf("the policy is invalid: %d error(s)", len(errs))}
			}
			for _, w := range warnings {
				fmt.Fprintf(e.stderr, "warning: %s\n", w)
			}
			fmt.Fprintf(e.stdout, "policy OK: %d rule(s) from %s\n", len(p.Rules), strings.Join(p.Sources, ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// checkAgainstDisks evaluates the policy on the disks of the sysfs tree, when
// it can be read, and words the rules that matched none of them.
func (e *env) checkAgainstDisks(p *policy.Policy) []string {
	devs, skipped, err := e.readDevices(nil, true)
	if err != nil {
		return []string{fmt.Sprintf("could not read the disks under %s to check the rules against: %v", e.sysfsRoot, err)}
	}
	as := make([]pipeline.Assessment, len(devs))
	for i, d := range devs {
		as[i] = pipeline.Assessment{Device: d, Eval: p.Evaluate(d)}
	}
	return append(append(skipped, unmatchedRules(p, as)...), e.writerConflicts(as)...)
}
