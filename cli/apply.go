package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/plan"
	"github.com/iosched/iosched/sysfs"
)

func newApplyCmd(e *env) *cobra.Command {
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "apply [DEVICE...]",
		Short: "Make each disk's settings what the policy says, and print what was done",
		Long: `apply does what plan shows. The disks are read, planned and written at once:
a value already in place is not written (the kernel freezes the queue even for a
same-value scheduler write), and a value an earlier write may have reset (a
scheduler switch resets nr_requests and the scheduler's parameters) is read
again before it is written. Disks are done concurrently, one disk's writes in
order: scheduler, nr_requests, the scheduler's iosched/* parameters, the rest.
Each write is read back. EBUSY is retried; a disk that goes away is reported
and the others are still done.

Exit status: 0 when everything is in place, 1 if anything failed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, as, _, err := e.assess(args)
			if err != nil {
				return err
			}
			fs, err := e.fs()
			if err != nil {
				return err
			}
			plans := make([]plan.Device, len(as))
			failed := false
			for i, a := range as {
				plans[i] = a.plan
				failed = failed || len(a.plan.Errors) > 0
			}
			a := &apply.Applier{FS: fs, DryRun: dryRun}
			start := time.Now()
			results := a.All(cmd.Context(), plans)
			took := time.Since(start)
			for i := range results {
				failed = failed || results[i].Failed()
			}
			if asJSON {
				err = writeJSON(e.stdout, applyJSON(results))
			} else {
				renderApply(e.stdout, plans, results, took, dryRun)
			}
			if err != nil {
				return err
			}
			if failed {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "write nothing: show what would be written")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

type outcomeJSON struct {
	apply.Outcome
	Error string `json:"error,omitempty"`
}

type resultJSON struct {
	Name     string        `json:"name"`
	Gone     bool          `json:"gone,omitempty"`
	Writes   int           `json:"writes"`
	Outcomes []outcomeJSON `json:"outcomes"`
}

func applyJSON(results []apply.Result) any {
	out := make([]resultJSON, 0, len(results))
	for _, r := range results {
		rj := resultJSON{Name: r.Device, Gone: r.Gone, Writes: r.Writes, Outcomes: []outcomeJSON{}}
		for _, o := range r.Outcomes {
			oj := outcomeJSON{Outcome: o}
			if o.Err != nil {
				oj.Error = o.Err.Error()
			}
			rj.Outcomes = append(rj.Outcomes, oj)
		}
		out = append(out, rj)
	}
	return struct {
		Devices []resultJSON `json:"devices"`
	}{out}
}

func renderApply(w io.Writer, plans []plan.Device, results []apply.Result, took time.Duration, dryRun bool) {
	count := map[apply.Status]int{}
	for i, r := range results {
		for _, o := range r.Outcomes {
			count[o.Status]++
			switch o.Status {
			case apply.Written:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q)\n", r.Device, o.Attribute, o.Before, o.To, o.Rule)
			case apply.Planned:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q): not written (dry run)\n", r.Device, o.Attribute, orFrom(o), o.To, o.Rule)
			case apply.Mismatch, apply.Failed:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q): %s: %s\n", r.Device, o.Attribute, orFrom(o), o.To, o.Rule, o.Status, outcomeError(o.Err))
			}
		}
		if r.Gone {
			fmt.Fprintf(w, "%s: the disk went away during apply\n", r.Device)
		}
		for _, s := range plans[i].Skipped {
			fmt.Fprintf(w, "%s: skip %s: %s; rule %q\n", r.Device, s.Attribute, s.Reason, s.Rule)
		}
		for _, msg := range plans[i].Errors {
			count[apply.Failed]++
			fmt.Fprintf(w, "%s: error: %s\n", r.Device, msg)
		}
	}
	verb := "apply"
	if dryRun {
		verb = "apply --dry-run"
	}
	fmt.Fprintf(w, "%s: %d written, %d failed, %d not kept by the kernel, %d planned, %d found in place when read again, on %d disk(s) in %s\n",
		verb, count[apply.Written], count[apply.Failed], count[apply.Mismatch], count[apply.Planned], count[apply.Unchanged],
		len(results), took.Round(time.Millisecond))
}

// orFrom is the value an outcome started from: as read just before, else as
// planned.
func orFrom(o apply.Outcome) string {
	if o.Before != "" {
		return o.Before
	}
	return showFrom(o.Change)
}

// outcomeError words a failure without repeating the disk's name, which
// starts the line already.
func outcomeError(err error) string {
	var ae *sysfs.AttrError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%s %s: %v", ae.Op, ae.Attr, ae.Err)
	}
	return err.Error()
}
