// Package fleetcli is the iosched fleet command, a program of its own
// (cmd/iosched-fleet) that iosched runs for it: it links Prometheus'
// HTTP client and net/http, which the daemon's binary stays without
// (they added about 4.5 MB to every iosched process's resident memory,
// the daemon's included, against its memory target).
package fleetcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/cli"
	"github.com/iosched/iosched/internal/fleet"
	"github.com/iosched/iosched/internal/probe/probeopt"
)

// NewCommand is the fleet command, writing to stdout and stderr.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		url, match, rangeS, exportSeeds, at string
		asJSON                              bool
		minMachines                         int
		timeout                             time.Duration
		seedOpts                            fleet.SeedOptions
	)
	cmd := &cobra.Command{
		Use:   "fleet --prometheus URL [flags]",
		Short: "The fleet's table from Prometheus: per kind of disk, where busy time sits and which scheduler wins there",
		Long: `fleet asks a Prometheus server that scrapes every machine's iosched
metrics file (node_exporter's textfile collector) for the fleet's view,
per hardware key (the key probe results are shared under: class, driver,
model, queues, size, kernel):

  - machines and disks of the key, and the busy disk-hours observed over
    --range (rules with an observe key record them);
  - the share of busy time at each depth (requests in flight while busy,
    log-spaced buckets 1, 2, 4, ... 256, more);
  - each candidate scheduler's probe curve as the daemons export it at
    the window's end: at each probe depth, the median IOPS over the
    machines that measured it (each machine's own the median of its disks
    of the key), least and greatest; seeded curves, copies of others', are
    left out;
  - the verdict: each candidate's IOPS change against the scheduler the
    kernel gives such a disk (mq-deadline for one hardware queue, none for
    more or for a driver that asks for none, as block/elevator.c), weighted
    by the fleet's busy time at each depth, and its range over the
    machines, each on its own curves:

  at this fleet's depths none gains 7% against mq-deadline (range +4%
  to +11% over 12 machines); 62% of busy time is at depth 1-2, where it
  loses 3%

A bucket stands for one depth (1; the geometric middle of its bounds; 256
for the last) and curves are read there linear in log(depth), flat past
their ends. A key with no probe data, no busy time, or fewer than
--min-machines machines says so instead of a verdict.

--match adds PromQL label matchers on iosched_disk_info, e.g.
--match '{key=~"virtio.*"}' or '{job="node",class="nvme"}': busy time
and curves are then those of the disks it selects (a join, which costs
Prometheus more on a large fleet); without it, the curves are those of
every disk of the key that exports them, observed or not. --range is a
Prometheus duration (7d, 12h). --at ends the window elsewhere than now
(RFC 3339).

--export-seeds FILE also writes the fleet's median curves, one result per
key with at least --min-machines machines, as a seeded file for [daemon]
probe_results (iosched-policy(5)): a new machine of a known key starts on
the fleet's figures without probing. A probe takes a seeded result only
for its own method, and the metrics do not say the engine, deep-queue
depth or block size: --engine, --depth and --block-size say them (the
defaults are those of an empty [rule.probe]).

Read-only: nothing on this machine or the fleet's is changed.

--json: {"keys": [{"key", "machines", "disks", "busy_hours", "depths":
[{"le", "share"}], "curves": [{"scheduler", "points": [{"depth",
"median", "min", "max", "machines"}]}], "kernel", "verdicts":
[{"scheduler", "change", "low", "high", "machines", "by_depth"}],
"note"}]}; change, low and high are fractions (0.07 for +7%), by_depth
the change in each bucket of depths.

Exit status: 0 when at least one key has data; 1 when the query failed or
no disk matched (nothing to show); 2 for a bad flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(format string, a ...any) error {
				return &cli.ExitError{Code: 2, Msg: "fleet: " + fmt.Sprintf(format, a...)}
			}
			if url == "" {
				return usage("--prometheus URL is required (the server that scrapes the fleet's node_exporters)")
			}
			d, err := model.ParseDuration(rangeS)
			if err != nil || d <= 0 {
				return usage("--range %q: want a Prometheus duration such as 7d or 12h", rangeS)
			}
			o := fleet.Options{Match: match, Range: time.Duration(d), MinMachines: minMachines}
			if at != "" {
				if o.At, err = time.Parse(time.RFC3339, at); err != nil {
					return usage("--at %q: want RFC 3339, such as 2026-12-01T12:00:00Z", at)
				}
			}
			if minMachines < 1 {
				return usage("--min-machines %d: want at least 1", minMachines)
			}
			if err := checkSeedMethod(seedOpts); err != nil {
				return usage("%v", err)
			}
			if m := strings.TrimSpace(match); m != "" && (!strings.HasPrefix(m, "{") || !strings.HasSuffix(m, "}")) {
				return usage("--match %q: want label matchers in braces, such as {key=~\"virtio.*\"}", match)
			}
			client, err := api.NewClient(api.Config{Address: url})
			if err != nil {
				return usage("--prometheus %q: %v", url, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rep, err := fleet.Query(ctx, v1.NewAPI(client), o)
			if err != nil {
				return &cli.ExitError{Code: 1, Msg: "fleet: " + cli.PrintableLines(err.Error())}
			}
			if exportSeeds != "" {
				seedOpts.MinMachines, seedOpts.At = minMachines, o.At
				if seedOpts.At.IsZero() {
					seedOpts.At = time.Now()
				}
				n, err := fleet.ExportSeeds(exportSeeds, rep, seedOpts)
				if err != nil {
					return &cli.ExitError{Code: 1, Msg: "fleet: " + cli.PrintableLines(err.Error())}
				}
				fmt.Fprintf(stderr, "iosched: fleet: the curves of %d key%s written to %s\n", n, plural(n), exportSeeds)
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printFleet(stdout, rep)
			}
			if len(rep.Keys) == 0 {
				return &cli.ExitError{Code: 1, Msg: "fleet: no observed disk matched: is node_exporter's textfile collector reading the daemons' metrics directory, and does a rule observe the disks?"}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &cli.ExitError{Code: 2, Msg: "fleet: " + err.Error()}
	})
	f := cmd.Flags()
	f.StringVar(&url, "prometheus", "", "the Prometheus server's URL, such as http://prometheus:9090")
	f.StringVar(&match, "match", "", "PromQL label matchers on iosched_disk_info, such as {key=~\"virtio.*\"}")
	f.StringVar(&rangeS, "range", "7d", "the window busy time is counted over (a Prometheus duration)")
	f.StringVar(&at, "at", "", "end of the window, RFC 3339 (default now)")
	f.IntVar(&minMachines, "min-machines", 3, "the fewest machines a key needs for a verdict (and to be exported)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.DurationVar(&timeout, "timeout", time.Minute, "how long the queries may take")
	f.StringVar(&exportSeeds, "export-seeds", "", "also write the fleet's median curves as a seeded probe results file")
	f.StringVar(&seedOpts.Engine, "engine", "", "with --export-seeds: the probe engine the results say they were measured by (default io_uring)")
	f.IntVar(&seedOpts.Depth, "depth", 0, "with --export-seeds: the deep-queue depth they say (default an empty [rule.probe]'s, 32)")
	f.IntVar(&seedOpts.BlockSize, "block-size", 0, "with --export-seeds: the read size they say (default 4096)")
	return cmd
}

// checkSeedMethod refuses a method no probe could have measured by: its
// results would be written and never used.
func checkSeedMethod(o fleet.SeedOptions) error {
	switch {
	case o.Engine != "" && !slices.Contains(probeopt.EngineNames(), o.Engine):
		return fmt.Errorf("--engine %q: want one of %s", o.Engine, strings.Join(probeopt.EngineNames(), ", "))
	case o.Depth != 0 && (o.Depth < 1 || o.Depth > probeopt.MaxDepth):
		return fmt.Errorf("--depth %d: want 1..%d", o.Depth, probeopt.MaxDepth)
	case o.BlockSize != 0:
		if err := probeopt.CheckBlockSize(o.BlockSize); err != nil {
			return fmt.Errorf("--block-size %d: %v", o.BlockSize, err)
		}
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// printFleet prints the report: per key, its counts, busy time by depth,
// curves and verdicts or the note.
func printFleet(w io.Writer, rep *fleet.Report) {
	for i, k := range rep.Keys {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", cli.Printable(k.Key))
		kernel := k.Kernel
		if kernel == "" {
			kernel = "no scheduler"
		}
		fmt.Fprintf(w, "  %d machine%s, %d disk%s, %.1f busy disk-hours; the kernel's choice: %s\n",
			k.Machines, plural(k.Machines), k.Disks, plural(k.Disks), k.BusyHours, kernel)
		if len(k.Depths) > 0 {
			var parts []string
			for j, d := range k.Depths {
				if d.Share >= 0.005 {
					parts = append(parts, fmt.Sprintf("%s %.0f%%", depthRange(k.Depths, j, j), 100*d.Share))
				}
			}
			fmt.Fprintf(w, "  busy time by depth: %s\n", strings.Join(parts, ", "))
		}
		if len(k.Curves) > 0 {
			fmt.Fprintln(w, "  curves, median IOPS over the machines (least-greatest, machines):")
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprint(tw, "    depth")
			for _, c := range k.Curves {
				fmt.Fprintf(tw, "\t%s", cli.Printable(c.Scheduler))
			}
			fmt.Fprintln(tw)
			for _, depth := range curveDepths(k.Curves) {
				fmt.Fprintf(tw, "    %d", depth)
				for _, c := range k.Curves {
					cell := "-"
					for _, p := range c.Points {
						if p.Depth == depth {
							cell = fmt.Sprintf("%s (%s-%s, %d)", iops(p.Median), iops(p.Min), iops(p.Max), p.Machines)
						}
					}
					fmt.Fprintf(tw, "\t%s", cell)
				}
				fmt.Fprintln(tw)
			}
			tw.Flush()
		}
		for _, v := range k.Verdicts {
			fmt.Fprintf(w, "  %s\n", verdictLine(k, v))
		}
		if k.Note != "" {
			fmt.Fprintf(w, "  no verdict: %s\n", k.Note)
		}
	}
}

// verdictLine is "at this fleet's depths none gains 7% (range 4% to 11%
// over 12 machines)", with the busy time where the change goes the other
// way, if any: "; 62% of busy time is at depth 1-2, where it loses 3%".
func verdictLine(k fleet.Key, v fleet.Verdict) string {
	s := fmt.Sprintf("at this fleet's depths %s %s against %s (range %s to %s over %d machine%s)",
		cli.Printable(v.Scheduler), gainsLoses(v.Change), cli.Printable(k.Kernel), pct(v.Low), pct(v.High), v.Machines, plural(v.Machines))
	first, last := -1, -1
	share, sum := 0.0, 0.0
	for i, d := range k.Depths {
		if i >= len(v.ByDepth) || d.Share == 0 || (v.ByDepth[i] < 0) == (v.Change < 0) {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
		share += d.Share
		sum += d.Share * v.ByDepth[i]
	}
	if share > 0 {
		s += fmt.Sprintf("; %.0f%% of busy time is at depth %s, where it %s", 100*share, depthRange(k.Depths, first, last), gainsLoses(sum/share))
	}
	return s
}

func gainsLoses(c float64) string {
	if c < 0 {
		return fmt.Sprintf("loses %.0f%%", -100*c)
	}
	return fmt.Sprintf("gains %.0f%%", 100*c)
}

func pct(c float64) string { return fmt.Sprintf("%+.0f%%", 100*c) }

// depthRange names the depths of buckets first..last: "1", "3-4",
// "1-2", "more than 256".
func depthRange(ds []fleet.DepthShare, first, last int) string {
	lo := 1.0
	if first > 0 {
		lo = math.Floor(ds[first-1].Le) + 1
	}
	hi := ds[last].Le
	if math.IsInf(hi, 1) {
		return "more than " + strconv.FormatFloat(lo-1, 'g', -1, 64)
	}
	if lo >= hi {
		return strconv.FormatFloat(hi, 'g', -1, 64)
	}
	return strconv.FormatFloat(lo, 'g', -1, 64) + "-" + strconv.FormatFloat(hi, 'g', -1, 64)
}

// curveDepths are the depths any curve has a point at, increasing.
func curveDepths(cs []fleet.Curve) []int {
	seen := map[int]bool{}
	var out []int
	for _, c := range cs {
		for _, p := range c.Points {
			if !seen[p.Depth] {
				seen[p.Depth] = true
				out = append(out, p.Depth)
			}
		}
	}
	slices.Sort(out)
	return out
}

// iops is a rate as "143K", "1.2M" or "950".
func iops(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "K"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "K"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// Main runs `iosched fleet ARGS...` and returns the exit code, as
// cli.Main does for iosched's other commands.
func Main(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{Use: "iosched", SilenceUsage: true, SilenceErrors: true}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(NewCommand(stdout, stderr))
	root.SetArgs(append([]string{"fleet"}, args...))
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintln(stderr, "iosched:", ee.Msg)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "iosched:", cli.PrintableLines(err.Error()))
	return 1
}
