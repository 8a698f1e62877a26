package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/sysfs"
)

// errProbing is why apply leaves a disk alone while a probe measures it
// (or another writer, the daemon, holds its lock).
var errProbing = errors.New("not written: a probe is measuring this disk, or iosched is writing its settings (its lock is held); run apply again when it is done")

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
Each write is read back. EBUSY is retried; a disk that goes away, or a named
disk that is not there, is reported gone and the others are still done. A disk
a probe is measuring (iosched probe, or the daemon's, whatever its --state-dir)
is not written: its changes fail with the reason, and apply can be run again after.
Apply holds the same lock around its writes to a disk, so no probe starts on
a disk apply is writing.

Exit status: 0 when everything is in place, 1 if anything failed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			moreProcs()
			locks := e.locks()
			defer locks.Close()
			var mu sync.Mutex
			applied := map[string]apply.Result{}
			start := time.Now()
			// Each disk is read, planned and written in its own goroutine,
			// through its directory held open: reads of one disk overlap
			// the writes of others, which mostly wait (a scheduler switch
			// waits for RCU grace periods).
			_, rs, _, err := e.assess(args, pipeline.ScopeFor, applyParallel, func(pipe *pipeline.Pipeline, r *diskResult, disk *sysfs.Disk) {
				res := apply.Result{Device: r.name, Outcomes: []apply.Outcome{}}
				if !r.Plan.Empty() {
					written, err := pipe.Write(ctx, locks, apply.Applier{DryRun: dryRun}, disk, r.Plan, nil)
					if err == nil {
						res = written
					} else {
						// Held: a probe measures the disk, or another
						// writer is at it.
						if disklock.IsBusy(err) {
							err = errProbing
						}
						for _, c := range r.Plan.Changes {
							res.Outcomes = append(res.Outcomes, apply.Outcome{Change: c, Status: apply.Failed, Err: err})
						}
					}
				}
				mu.Lock()
				applied[r.name] = res
				mu.Unlock()
			})
			if err != nil {
				return err
			}
			took := time.Since(start)
			named := len(args) > 0
			var done []diskResult
			var results []apply.Result
			var gone []diskResult
			var skipped []string
			failed := false
			for _, r := range rs {
				switch {
				case r.err == nil:
					res := applied[r.name]
					done = append(done, r)
					results = append(results, res)
					failed = failed || len(r.Plan.Errors) > 0 || res.Failed()
				case named:
					// A disk asked for by name that is not there is a
					// failure, but not the others'.
					gone = append(gone, r)
					failed = true
				default:
					skipped = append(skipped, "skipped: "+r.err.Error())
				}
			}
			if asJSON {
				err = writeJSON(e.stdout, applyJSON(results, gone))
			} else {
				renderApply(e.stdout, done, results, gone, skipped, took, dryRun)
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
	cmd.Flags().StringVar(&e.stateDir, "state-dir", paths.Default.State, "where the daemon remembers probe results ([rule.probe])")
	return cmd
}

type outcomeJSON struct {
	apply.Outcome
	Error string `json:"error,omitempty"`
}

type resultJSON struct {
	Name     string        `json:"name"`
	Gone     bool          `json:"gone,omitempty"`
	Error    string        `json:"error,omitempty"`
	Writes   int           `json:"writes"`
	Outcomes []outcomeJSON `json:"outcomes"`
}

// applyParallel bounds how many disks apply reads and writes at once. A
// scheduler switch blocks its thread in the kernel waiting for RCU grace
// periods, and switches made at once wait for the same ones: the more
// disks in flight, the closer apply comes to one wait for all (measured in
// contrib/bench/README.md). Each holds an OS thread, a few KiB, for the
// life of a short process.
const applyParallel = 1024

// moreProcs lets the Go scheduler run twice as many goroutines at once as
// there are CPUs, unless GOMAXPROCS is set in the environment, as the
// daemon does: a goroutine blocked in a scheduler write keeps its P until
// sysmon takes it back (20 us to 10 ms later), so with one P per CPU the
// next disk's read waits for sysmon, not for a CPU (measured in
// contrib/bench/README.md).
func moreProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2 * runtime.NumCPU())
	}
}

func applyJSON(results []apply.Result, gone []diskResult) any {
	out := make([]resultJSON, 0, len(results)+len(gone))
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
	for _, g := range gone {
		out = append(out, resultJSON{Name: g.name, Gone: true, Error: g.err.Error(), Outcomes: []outcomeJSON{}})
	}
	return struct {
		Devices []resultJSON `json:"devices"`
	}{out}
}

func renderApply(w io.Writer, done []diskResult, results []apply.Result, gone []diskResult, warnings []string, took time.Duration, dryRun bool) {
	count := map[apply.Status]int{}
	for i, r := range results {
		name := printable(r.Device)
		for _, o := range r.Outcomes {
			count[o.Status]++
			attr, before, from, to, rule := o.Attribute, printable(o.Before), printable(orFrom(o)), printable(o.To), o.Rule
			switch o.Status {
			case apply.Written:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q)\n", name, attr, before, to, rule)
			case apply.Planned:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q): not written (dry run)\n", name, attr, from, to, rule)
			case apply.Mismatch, apply.Failed:
				fmt.Fprintf(w, "%s: %s: %s -> %s (rule %q): %s: %s\n", name, attr, from, to, rule, o.Status, printable(outcomeError(o.Err)))
			}
		}
		if r.Gone {
			fmt.Fprintf(w, "%s: the disk went away during apply\n", name)
		}
		p := done[i].Plan
		for _, s := range p.Skipped {
			fmt.Fprintf(w, "%s: skip %s: %s; rule %q\n", name, s.Attribute, printable(s.Reason), s.Rule)
		}
		for _, msg := range p.Errors {
			count[apply.Failed]++
			fmt.Fprintf(w, "%s: error: %s\n", name, printable(msg))
		}
	}
	for _, g := range gone {
		fmt.Fprintf(w, "%s: gone: %s\n", printable(g.name), printableLines(g.err.Error()))
	}
	for _, msg := range warnings {
		fmt.Fprintf(w, "warning: %s\n", printable(msg))
	}
	verb := "apply"
	if dryRun {
		verb = "apply --dry-run"
	}
	goneNote := ""
	if len(gone) > 0 {
		goneNote = fmt.Sprintf(", %d named disk(s) gone", len(gone))
	}
	fmt.Fprintf(w, "%s: %d written, %d failed, %d not kept by the kernel, %d planned, %d found in place when read again, on %d disk(s)%s in %s\n",
		verb, count[apply.Written], count[apply.Failed], count[apply.Mismatch], count[apply.Planned], count[apply.Unchanged],
		len(results), goneNote, took.Round(time.Millisecond))
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
