package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/procs"
	"github.com/iosched/iosched/internal/sysfs"
)

func newProbeCmd(e *env) *cobra.Command {
	var (
		candidates, nrRequests            []string
		duration                          time.Duration
		rounds, depth                     int
		depths                            []int
		blockSize, engine, choose, margin string
		stateDir, export                  string
		apply, fresh, force, asJSON       bool
	)
	def := probe.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "probe DEVICE... [flags]",
		Short: "Measure each candidate scheduler on a disk (read-only) and say which suits it",
		Long: `probe runs a short read-only benchmark of each candidate scheduler on the disk
itself: per round and candidate (alternating order: A B, then B A, ...) it
switches the scheduler, warms up, then reads random aligned blocks with O_DIRECT
at each depth of the curve (--depths, default 1,4,16,64: IOPS, p50, p99), at
depth 1 (latency p50/p99/p99.9, IOPS) and at --depth (IOPS, MiB/s, p99), each
depth once. A candidate's figure is the median over rounds. Depths beyond the
disk's hardware queue depth (its tag count, mq/0/nr_tags: what the device
holds at once, the same under every scheduler, unlike nr_requests) are
measured at that count. Each point of the curve also records the depth the
disk itself saw: its mean requests in flight over the measurement, from the
time_in_queue counter of /sys/block/DEV/stat (observed_depth). It is lower
than the depth asked when the reader, not the disk, is the bottleneck (a
loop device over /dev/shm), and it is the depth live observation can see.
Before the first switch the probe sizes the disk: 8 reads at depth 1 give
its read time (a disk that answers none within 1.5 s does not answer; one
whose reads take over 1/8 s is too slow to probe; a --duration shorter than
two reads is refused, with one that works). Where draining the deepest
point's reads would cost more than 50 ms and an eighth of a measurement (a
disk that serves one read at a time drains d reads in d read times), a short
pass up the depths finds where IOPS stops growing: depths past the first
flat one are dropped, the deep-queue depth too (reported as flat_at; the
result serves later lookups of the depths asked). The bound printed then
("at most Xs") counts each measurement's drain; the defaults take at most
15 s on a disk that answers at once. Reads a measurement leaves are waited
for twice their expected drain (at least 0.5 s) before the disk counts as
not answering. With --engine psync, a thread per read in flight must fit
the process's address-space limit (ulimit -v): a probe it cannot hold is
refused first, saying which depth, engine or limit would do.

--choose iops: a challenger must beat the incumbent's deep-queue IOPS by more
than --margin in the median and in a majority of rounds; latency: the same on
depth-1 p99; balanced (default): win on deep-queue IOPS while losing no more
than --margin on depth-1 p99. Otherwise the incumbent (the disk's scheduler
when it is a candidate, else the first) stays.

--nr-requests default,64 makes the scheduler's pool of requests
(queue/nr_requests) a second dimension: each scheduler is measured with each
value, "default" being the value the kernel gives that scheduler on the disk
(read back after the switch to it; for the scheduler the disk already runs,
twice the hardware tags up to 256 with an elevator, the tags with none). A
pool below the depth a workload drives holds reads back in the submitter
(io_uring hands them to io-wq workers). Each value is written after the
switch, which resets it, and read back: the figures are the value the disk
took, shown in brackets when it differs from the one named (with none the
kernel refuses more than the hardware's tags, so more is asked as the tags;
and less shrinks the tags every scheduler then uses, which no switch grows
back: the probe grows them back under none before measuring another
scheduler and before it ends).
The incumbent is the disk's scheduler with its nr_requests when both are
candidates; the winner's nr_requests is applied with its scheduler (--apply,
or a [rule.probe] with nr_requests), written after it. While sizing, a curve
found flat past the disk's own nr_requests drops no depth: the pool, which
the candidates change, may be what flattens it.

Safety: the node is opened O_RDONLY|O_DIRECT and the disk's write counters are
reported; the scheduler and what a switch resets (nr_requests, iosched/*,
wbt_lat_usec) are recorded in --state-dir before the first switch and put back
at the end, on error, on SIGINT, SIGTERM, SIGHUP (a closed terminal or SSH
session), SIGQUIT and SIGPIPE, and when the reader of its output goes away
(iosched probe ... | head -1); after SIGKILL, by the next probe or daemon
start, while the disk still shows what the probe left (values set since are
not undone, and an unreadable record is moved aside and warned of). One
probe per disk at a time, whatever the --state-dir: the lock is the machine's
(/run/lock/iosched/disks.lock), which the daemon and apply take for their
writes. A busy disk is refused unless --force; a result measured with
--force while others used the disk (or one others wrote to meanwhile) is
remembered marked as disturbed and never reused: the daemon probes the disk
again when it is idle. The time
budget is printed before starting and kept within a second, also on a disk
that stops answering: its restore, a switch that waits for the reads in
flight, is then left to finish on its own, the disk locked until it does and
the record kept for the next probe or daemon start. The probe prints its
error on time, but the process cannot exit before that switch returns: the
kernel waits for a frozen queue (blk_mq_freeze_queue_wait) uninterruptibly,
and a process ends only once each of its threads leaves the kernel, so on a
disk that never answers again it stays (state D) whatever signal it gets.

If someone else changes the disk's scheduler while it is probed (checked
before each switch, after each measurement and before the restore), the
probe ends without a result and puts nothing back over that change: it says
so, and the other's scheduler stays.

Results are remembered in --state-dir/probes.json, keyed by class, driver,
model, hardware queues, queue depth, size and kernel release; a remembered
decision is shown without probing unless --fresh. --export FILE writes them
in the form [daemon] probe_results reads. Each result remembered prunes the
file: the newest result of each key and method is kept, those of a kernel
release not seen running for 30 days are dropped (a rollback within that
finds its results), and the file is kept under 12 MiB, the oldest results
dropped first (it is read at up to 16 MiB; a larger one, from an older
iosched, is pruned too, not set aside).

Exit status: 0 when every disk was probed (or had a remembered result), 1
otherwise (a refusal says why).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && export == "" {
				return &ExitError{Code: 2, Msg: "probe: name at least one disk (or --export FILE)"}
			}
			o := probe.Options{Options: probeopt.Options{Candidates: candidates, Duration: duration, Rounds: rounds, Depth: depth, Depths: depths,
				Engine: engine, Choose: choose},
				Apply: apply, Force: force}
			for _, v := range nrRequests {
				n, err := probeopt.ParseNrRequests(strings.TrimSpace(v))
				if err != nil {
					return &ExitError{Code: 2, Msg: "probe: --nr-requests: " + err.Error()}
				}
				o.NrRequests = append(o.NrRequests, n)
			}
			bs, err := policy.ParseSize(blockSize)
			if err != nil {
				return &ExitError{Code: 2, Msg: "probe: --block-size: " + err.Error()}
			}
			o.BlockSize = int(min(bs, 1<<30)) // out of range either way
			if o.Margin, err = policy.ParseMargin(margin); err != nil {
				return &ExitError{Code: 2, Msg: "probe: --margin: " + err.Error()}
			}
			if err := o.Validate(); err != nil {
				return &ExitError{Code: 2, Msg: err.Error()}
			}
			fs, err := e.fs()
			if err != nil {
				return err
			}
			store := probe.OpenStore(stateDir, nil)
			locks := e.locks()
			defer locks.Close()
			recovered, err := probe.RecoverInterrupted(stateDir, locks, fs)
			if err != nil {
				return err
			}
			for _, r := range recovered {
				switch {
				case r.Err != nil:
					fmt.Fprintf(e.stderr, "iosched: %s: restoring the settings an interrupted probe left: %s\n", printable(r.Device), printableLines(r.Err.Error()))
				case r.Restored:
					fmt.Fprintf(e.stderr, "%s: restored the settings an interrupted probe left\n", printable(r.Device))
				case r.Aside != "":
					fmt.Fprintf(e.stderr, "iosched: warning: %s: an interrupted probe's record: %s\n", printable(r.Device), printable(r.Note))
				default:
					fmt.Fprintf(e.stderr, "%s: dropped an interrupted probe's record: %s\n", printable(r.Device), printable(r.Note))
				}
			}
			ctx, stop := e.interruptible(context.Background())
			defer stop()
			var procs procs.Raiser
			runner := &probe.Runner{FS: fs, DevDir: e.devDir, StateDir: stateDir, Locks: locks, Store: store,
				Progress: func(s string) { fmt.Fprintln(e.stderr, s) }, Procs: procs.Raise}
			reports := []*probe.Report{}
			var failures []string
			for _, name := range args {
				var rep *probe.Report
				disk, err := sysfs.ParseName(name)
				if err == nil {
					rep, err = runner.Probe(ctx, disk, o, fresh, 0)
				}
				err = withAdvice(err)
				if err != nil {
					failures = append(failures, err.Error())
					fmt.Fprintln(e.stderr, "iosched:", printableLines(err.Error()))
					if rep != nil && rep.Winner == "" && rep.Restored {
						fmt.Fprintf(e.stderr, "%s: original settings restored (scheduler %s)\n", printable(name), printable(rep.Original))
					}
				}
				if rep != nil && (err == nil || rep.Winner != "") {
					reports = append(reports, rep)
				}
				if ctx.Err() != nil {
					break
				}
			}
			if asJSON {
				var v any = reports
				if len(args) == 1 && len(reports) == 1 {
					v = reports[0]
				}
				if len(args) > 0 {
					if err := writeJSON(e.stdout, v); err != nil {
						return err
					}
				}
			} else {
				for _, r := range reports {
					renderProbe(e.stdout, r)
				}
			}
			if export != "" {
				n, err := store.Export(export)
				if err != nil {
					return fmt.Errorf("export: %w", err)
				}
				fmt.Fprintf(e.stderr, "exported %d results to %s\n", n, export)
			}
			if len(failures) > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&candidates, "candidates", def.Candidates, "schedulers to compare (at least two the disk offers)")
	f.StringSliceVar(&nrRequests, "nr-requests", nil, fmt.Sprintf("nr_requests values to measure each scheduler with: \"default\" (the kernel's, read back after the switch) or %d..%d; the decision sets the winner's", probeopt.MinNrRequests, probeopt.MaxNrRequests))
	f.DurationVar(&duration, "duration", def.Duration, fmt.Sprintf("length of each measurement (%s..%s)", probeopt.MinDuration, probeopt.MaxDuration))
	f.IntVar(&rounds, "rounds", def.Rounds, fmt.Sprintf("rounds, candidates in alternating order (1..%d)", probeopt.MaxRounds))
	f.IntVar(&depth, "depth", def.Depth, fmt.Sprintf("reads in flight in the deep-queue measurement (1..%d)", probeopt.MaxDepth))
	f.IntSliceVar(&depths, "depths", def.Depths, fmt.Sprintf("the curve's depths, ascending (at most %d, each 1..%d; capped at the disk's queue depth)", probeopt.MaxDepths, probeopt.MaxDepth))
	f.StringVar(&blockSize, "block-size", "4KiB", "size of each read (a power of two, 512B..1MiB)")
	f.StringVar(&engine, "engine", "", fmt.Sprintf("%s (default the first the kernel allows)", strings.Join(probeopt.EngineNames(), " or ")))
	f.StringVar(&choose, "choose", def.Choose, probeopt.ChooseBalanced+", "+probeopt.ChooseIOPS+" or "+probeopt.ChooseLatency)
	f.StringVar(&margin, "margin", "5%", "how much better a challenger must be")
	f.BoolVar(&apply, "apply", false, "keep the winner instead of restoring the original scheduler")
	f.BoolVar(&fresh, "fresh", false, "probe even when a result is remembered")
	f.BoolVar(&force, "force", false, "probe a disk that others are using")
	f.StringVar(&stateDir, "state-dir", paths.Default.State, "where probe results and the originals being probed are kept (the daemon's)")
	f.StringVar(&export, "export", "", "write the remembered results to FILE (for [daemon] probe_results)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func renderProbe(w io.Writer, r *probe.Report) {
	fmt.Fprintf(w, "%s: %s\n", printable(r.Device), printable(r.Reason))
	if r.From != "" {
		fmt.Fprintf(w, "  %s (key %s); --fresh probes again\n", printable(r.From), printable(r.RememberedAs))
	}
	curve := ""
	if len(r.Depths) > 0 {
		ds := make([]string, len(r.Depths))
		for i, d := range r.Depths {
			ds[i] = strconv.Itoa(d)
		}
		curve = ", curve at depths " + strings.Join(ds, ", ")
	}
	fmt.Fprintf(w, "  %s, depth 1 and %d%s, %d-byte random reads, %gs a measurement, %d rounds; choose %s, margin %g%%\n",
		r.Engine, r.Depth, curve, r.BlockSize, r.DurationS, r.Rounds, r.Choose, r.Margin*100)
	if r.From == "" {
		nowait := "unknown (" + r.NoWaitReason + ")"
		if r.NoWait != nil {
			nowait = map[bool]string{true: "yes", false: "no (io_uring must punt every read to worker threads)"}[*r.NoWait]
		}
		punt := ""
		switch {
		case !probe.EngineSeesPunting(r.Engine):
		case r.Punted == nil:
			punt = "; io_uring punting: cannot be seen here"
		case *r.Punted:
			punt = fmt.Sprintf("; io_uring punted reads to worker threads (%d worker runs)", r.WorkerRuns)
		default:
			punt = "; io_uring punting: none seen"
		}
		fmt.Fprintf(w, "  NOWAIT: %s%s\n", nowait, punt)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  scheduler\t\tIOPS\tMiB/s\tp50 µs\tp99 µs\tp99.9 µs\tQD1 IOPS\tQD1 p50\tQD1 p99\tQD1 p99.9\tCPU µs/IO\t")
	row := func(label, what string, f probe.Figures) {
		fmt.Fprintf(tw, "  %s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t\n", label, what,
			f.IOPS, f.MiBs, f.P50us, f.P99us, f.P999us, f.QD1IOPS, f.QD1P50, f.QD1P99, f.QD1P999, f.CPUPerIOus)
	}
	for _, c := range r.Candidates {
		label := c.Label()
		if c.Won(r.Decision) {
			label += " *"
		}
		row(label, "median", c.Figures)
		for _, rf := range c.Rounds {
			row("", fmt.Sprintf("round %d (%s)", rf.Round, ordinal(rf.Position)), rf.Figures)
		}
	}
	tw.Flush()
	if len(r.Candidates) > 0 && r.Rounds > 1 {
		sp := make([]string, len(r.Candidates))
		for i, c := range r.Candidates {
			sp[i] = fmt.Sprintf("%s %.0f%%", c.Name(), c.Spread*100)
		}
		fmt.Fprintf(w, "  spread of the rounds ((max-min)/median of the figure compared): %s; a difference below it or the margin is none\n", strings.Join(sp, ", "))
	}
	renderCurves(w, r)
	if r.From != "" {
		return
	}
	switch {
	case r.Applied != "" && r.WinnerNr > 0:
		fmt.Fprintf(w, "  kept %s with nr_requests %d (--apply); it was %s with %d\n", r.Applied, r.WinnerNr, r.Original, r.OriginalNr)
	case r.Applied != "" && r.Applied != r.Original:
		fmt.Fprintf(w, "  kept %s (--apply); it was %s\n", r.Applied, r.Original)
	case r.Restored && len(r.NrRequests) > 0:
		fmt.Fprintf(w, "  original settings restored (scheduler %s, nr_requests %d)\n", r.Original, r.OriginalNr)
	case r.Restored:
		fmt.Fprintf(w, "  original settings restored (scheduler %s)\n", r.Original)
	default:
		fmt.Fprintf(w, "  original settings NOT restored (scheduler was %s)\n", r.Original)
	}
	if r.Disturbed != "" {
		fmt.Fprintf(w, "  disturbed: %s; remembered as such and not reused: the daemon probes the disk again when it is idle\n", printable(r.Disturbed))
	}
	fmt.Fprintf(w, "  disk stat: reads %d -> %d, writes %d -> %d%s\n", r.ReadsBefore, r.ReadsAfter, r.WritesBefore, r.WritesAfter,
		map[bool]string{true: " (no writes)", false: ""}[r.WritesAfter == r.WritesBefore])
	fmt.Fprintf(w, "  took %.1fs of a %.1fs budget; remembered as %s\n", r.ElapsedS, r.BudgetS, printable(r.RememberedAs))
}

// renderCurves shows each candidate's curve on a line: IOPS at each depth,
// and in brackets the depth the disk saw. A result from before curves has
// none to show.
func renderCurves(w io.Writer, r *probe.Report) {
	if !slices.ContainsFunc(r.Candidates, func(c probe.Candidate) bool { return len(c.Curve) > 0 }) {
		return
	}
	fmt.Fprintln(w, "  curve: IOPS at each depth (in brackets, the disk's mean requests in flight)")
	width := 0
	for _, c := range r.Candidates {
		width = max(width, len(printable(c.Label())))
	}
	for _, c := range r.Candidates {
		fmt.Fprintf(w, "  %-*s  %s\n", width+2, printable(c.Label())+map[bool]string{true: " *", false: ""}[c.Won(r.Decision)], probe.CurveText(c.Curve))
	}
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "1st"
	case 2:
		return "2nd"
	case 3:
		return "3rd"
	}
	return fmt.Sprintf("%dth", n)
}
