package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/plan"
)

func newPlanCmd(e *env) *cobra.Command {
	var asJSON, detailed bool
	cmd := &cobra.Command{
		Use:   "plan [DEVICE...]",
		Short: "Show what apply would change on each disk, and why (writes nothing)",
		Long: `plan is the dry run: for each disk its class, the rules that matched, each
change as "attribute: from -> to (rule)", and the settings that cannot be made
with the reason. A value shown as "(after scheduler)" is one the scheduler
switch before it resets: apply reads it again then, and writes it only if it
moved. Disks that cannot be read, and rules of an admin's policy that match no
disk, are warned about. It writes nothing.

A udev rule or tuned setting that would undo the policy on a disk is warned
about with its file and line. Udev rules are read as systemd-udevd 252 reads
them (its keys, operators, escapes and $ and % substitutions, GOTO and LABEL,
the properties earlier rules set); a rule udevd refuses is named with udevd's
reason and counts for nothing. "sets" means udevd writes the value on every
way through the rules; "may write" that it does only if conditions iosched
cannot know here hold (a program's output, a file outside the disk's sysfs
directory, the kernel command line), named after "if". A value udevd fills
in from something unknown here is shown as written, as "an unknown value".
When the udevd under --root is not version 252, or none is found, a warning
says which reading was applied.

Exit status: 0, or 1 when a setting could not be planned because the disk
could not be read. With --detailed-exitcode: 0 when nothing would change, 2
when something would, 1 on error.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, rs, warnings, err := e.assess(args, pipeline.ScopeFor, readLimit(), nil)
			if err != nil {
				return err
			}
			notes := map[string]string{} // a probe pending or decided, by disk
			plans := make([]plan.Plan, 0, len(rs))
			changes, errs, gone := 0, 0, 0
			var skipped []string
			for _, r := range rs {
				switch {
				case r.err == nil:
					plans = append(plans, r.Plan)
					note := probeNote(r.Assessment)
					if r.probeErr != nil {
						warnings = append(warnings, fmt.Sprintf("%s: probe results: %v", r.name, r.probeErr))
					}
					if note != "" {
						notes[r.name] = note
					}
					changes += len(r.Plan.Changes)
					errs += len(r.Plan.Errors)
				case len(args) > 0:
					// Named and not there: said, and the others still
					// planned (sysfs errors name the device).
					fmt.Fprintln(e.stderr, "iosched:", printableLines(r.err.Error()))
					gone++
				default:
					skipped = append(skipped, "skipped: "+r.err.Error())
				}
			}
			warnings = append(skipped, warnings...)
			if asJSON {
				err = writeJSON(e.stdout, struct {
					Devices  []plan.Plan       `json:"devices"`
					Probes   map[string]string `json:"probes,omitempty"`
					Warnings []string          `json:"warnings"`
				}{plans, notes, append([]string{}, warnings...)})
			} else {
				renderPlans(e.stdout, plans, notes, warnings)
			}
			switch {
			case err != nil:
				return err
			case gone > 0:
				return &ExitError{Code: 1, Msg: fmt.Sprintf("%d named disk(s) not found", gone)}
			case errs > 0:
				return &ExitError{Code: 1, Msg: fmt.Sprintf("%d setting(s) could not be planned: see the errors above", errs)}
			case detailed && changes > 0:
				return &ExitError{Code: 2}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 2 when something would change, 0 when nothing would")
	cmd.Flags().StringVar(&e.stateDir, "state-dir", paths.Default.State, "where the daemon remembers probe results ([rule.probe])")
	return cmd
}

// renderPlans prints each disk's plan; notes (by disk) say what a probe
// will decide.
func renderPlans(w io.Writer, plans []plan.Plan, notes map[string]string, warnings []string) {
	changes, disks := 0, 0
	for _, p := range plans {
		rules := "no rule matched"
		if len(p.Rules) > 0 {
			rules = "rules " + quoteAll(p.Rules)
		}
		fmt.Fprintf(w, "%s (%s): %s\n", printable(p.Name), p.Class, rules)
		renderPlanBody(w, p)
		if n := notes[p.Name]; n != "" {
			fmt.Fprintf(w, "  %s\n", printable(n))
		}
		if len(p.Changes) > 0 {
			disks++
			changes += len(p.Changes)
		}
	}
	for _, msg := range warnings {
		fmt.Fprintf(w, "warning: %s\n", printable(msg))
	}
	fmt.Fprintf(w, "plan: %d change(s) on %d of %d disk(s)\n", changes, disks, len(plans))
}

// renderPlanBody prints a disk's changes, skipped settings, errors and
// warnings, indented.
func renderPlanBody(w io.Writer, p plan.Plan) {
	for _, c := range p.Changes {
		fmt.Fprintf(w, "  %s: %s -> %s (rule %q)\n", c.Attribute, printable(showFrom(c)), printable(c.To), c.Rule)
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(w, "  skip %s: %s; rule %q\n", s.Attribute, printable(s.Reason), s.Rule)
	}
	for _, msg := range p.Errors {
		fmt.Fprintf(w, "  error: %s\n", printable(msg))
	}
	for _, msg := range p.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", printable(msg))
	}
	if len(p.Changes)+len(p.Skipped)+len(p.Errors) == 0 {
		fmt.Fprintln(w, "  nothing to change")
	}
}
