package cli

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

func newExplainCmd(e *env) *cobra.Command {
	var (
		asJSON     bool
		runtimeDir string
	)
	cmd := &cobra.Command{
		Use:   "explain DEVICE",
		Short: "Show a disk's facts, every rule's verdict on it, and where each final setting comes from",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// One disk, shown whole: every fact, whatever the policy tests.
			all := func(*policy.Policy) pipeline.Scope { return pipeline.Everything() }
			pol, rs, _, err := e.assess(args, all, 1, nil)
			if err != nil {
				return err
			}
			if rs[0].err != nil {
				return &ExitError{Code: 1, Msg: printableLines(rs[0].err.Error())}
			}
			a := rs[0].Assessment
			fs, err := e.fs()
			if err != nil {
				return err
			}
			var pr probeShown
			pr.Decision, pr.Err = probeNote(a), rs[0].probeErr
			if a.Probe.Probed() {
				// The seeded results this disk's decision may come from.
				pr.Err = errors.Join(pr.Err, pipeline.SeedsOf(pol).Err())
			}
			if rec, err := rememberedFor(fs, e.stateDir, a.Device); err != nil {
				pr.Err = errors.Join(pr.Err, err)
			} else if rec != nil {
				pr.Remembered = recordLine(rec)
			}
			ad := adaptFor(pol, a.Device, runtimeDir)
			if asJSON {
				return writeJSON(e.stdout, struct {
					Device   *sysfs.Device       `json:"device"`
					Rules    []policy.RuleResult `json:"rules"`
					Settings []policy.Setting    `json:"settings"`
					Plan     plan.Plan           `json:"plan"`
					Probe    *probeShown         `json:"probe,omitempty"`
					Adapt    *adaptShown         `json:"adapt,omitempty"`
				}{a.Device, a.Eval.Rules, a.Eval.Settings, a.Plan, pr.orNil(), ad})
			}
			renderExplain(e.stdout, a)
			pr.render(e.stdout)
			ad.render(e.stdout)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&e.stateDir, "state-dir", paths.Default.State, "where the daemon remembers probe results ([rule.probe])")
	cmd.Flags().StringVar(&runtimeDir, "runtime-dir", paths.Default.Runtime, "the running daemon's runtime directory: its adaptive choice for the disk ([rule.adapt])")
	return cmd
}

// adaptShown is explain's adaptive section: the rule that adapts the disk
// and, while a daemon runs, what it chose by the disk's depth, which
// stands in place of the probe's decision.
type adaptShown struct {
	Rule string `json:"rule"`
	// Daemon is the running daemon's state of the disk; nil when none
	// runs, or it does not follow the disk (yet).
	Daemon *statefile.AdaptState `json:"daemon,omitempty"`
}

// adaptFor is the disk's adaptive section, nil when no adaptive rule
// matches it.
func adaptFor(pol *policy.Policy, dev *sysfs.Device, runtimeDir string) *adaptShown {
	ad, rule := pol.AdaptFor(dev)
	if ad == nil {
		return nil
	}
	out := &adaptShown{Rule: rule}
	if st, err := statefile.Read(runtimeDir); err == nil {
		if ds := st.Disks[dev.Name]; ds != nil {
			out.Daemon = ds.Adapt
		}
	}
	return out
}

func (a *adaptShown) render(w io.Writer) {
	if a == nil {
		return
	}
	fmt.Fprintln(w, "\nadapt:")
	fmt.Fprintf(w, "  rule %q switches the scheduler between the probe's candidates by the depth the disk's workload runs at\n", printable(a.Rule))
	st := a.Daemon
	switch {
	case st == nil:
		fmt.Fprintln(w, "  no running daemon follows the disk: the probe's decision stands")
	case st.Scheduler == "":
		fmt.Fprintln(w, "  the running daemon follows the disk, and has not switched it: the probe's decision stands")
	default:
		fmt.Fprintf(w, "  scheduler = %s, by the running daemon in place of the probe's decision", printable(st.Scheduler))
		if s := st.LastSwitch; s != nil {
			fmt.Fprintf(w, " (%s, at %s)", printable(s.Reason), s.At.Local().Format("2006-01-02 15:04:05"))
		}
		fmt.Fprintln(w)
	}
	if st != nil {
		for _, line := range adaptStatus(printableCopy(reflect.ValueOf(st)).Interface().(*statefile.AdaptState), time.Now()) {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

func renderExplain(w io.Writer, a pipeline.Assessment) {
	d := a.Device
	fmt.Fprintf(w, "%s\n", printable(d.Name))
	fact := func(k, v string) { fmt.Fprintf(w, "  %-12s %s\n", k+":", printable(v)) }
	fact("class", string(d.Class))
	fact("driver", orDash(d.Driver))
	if d.Transport != "" {
		fact("transport", d.Transport)
	}
	if d.DMName != "" {
		fact("dm name", fmt.Sprintf("%s (multipath: %v)", d.DMName, d.Multipath))
	}
	fact("path", d.Path)
	fact("rotational", optBool(d.Rotational)+missingNote(d, "rotational"))
	fact("removable", optBool(d.Removable)+missingNote(d, "removable"))
	fact("hw queues", optInt(d.HWQueues)+missingNote(d, "hw_queues"))
	switch {
	case d.Scheduler != nil:
		fact("scheduler", fmt.Sprintf("%s (offered: %s)", *d.Scheduler, strings.Join(d.Schedulers, " ")))
	case d.BioBased():
		fact("scheduler", "none possible (bio-based: "+d.BioBasedBy+")")
	case d.Missing["scheduler"] != "":
		fact("scheduler", "unknown"+missingNote(d, "scheduler"))
	default:
		fact("scheduler", "unknown (see the warnings)")
	}
	nowait := optBool(d.NoWait)
	if d.NoWait != nil && !*d.NoWait {
		nowait += ": " + noWaitMeans
	}
	if d.NoWaitReason != "" {
		nowait += " (" + d.NoWaitReason + ")"
	}
	fact("nowait", nowait)
	fact("size", humanSize(d.SizeBytes)+missingNote(d, "size"))
	if d.Model != "" {
		fact("model", d.Model)
	}
	for _, msg := range d.Errors {
		fmt.Fprintf(w, "  warning: %s\n", printable(msg))
	}

	fmt.Fprintln(w, "\nrules:")
	if len(a.Eval.Rules) == 0 {
		fmt.Fprintln(w, "  (the policy has no rules)")
	}
	for _, r := range a.Eval.Rules {
		if r.Matched {
			fmt.Fprintf(w, "  %d %q: matched\n", r.Index, r.Rule)
			continue
		}
		fmt.Fprintf(w, "  %d %q: no match\n", r.Index, r.Rule)
		for _, why := range r.Reasons {
			fmt.Fprintf(w, "      %s\n", printable(why))
		}
	}

	fmt.Fprintln(w, "\nsettings:")
	if len(a.Eval.Settings) == 0 {
		fmt.Fprintln(w, "  (none: no matching rule sets anything)")
	}
	for _, s := range a.Eval.Settings {
		line := fmt.Sprintf("  %s = %s (rule %q", s.Attribute, printable(strings.Join(s.Values, " or ")), s.Rule)
		if len(s.Overrode) > 0 {
			line += ", overriding " + quoteAll(s.Overrode)
		}
		fmt.Fprintln(w, line+")")
	}

	fmt.Fprintln(w, "\nplan:")
	renderPlanBody(w, a.Plan)
}

// missingNote says which file was missing when fact is unknown for that.
func missingNote(d *sysfs.Device, fact string) string {
	if file, ok := d.Missing[fact]; ok {
		return " (" + file + " is missing)"
	}
	return ""
}
