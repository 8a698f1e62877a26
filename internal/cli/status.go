package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/statefile"
)

func newStatusCmd(e *env) *cobra.Command {
	var (
		asJSON, all bool
		runtimeDir  string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what the running daemon manages, its last changes and errors",
		Long: `iosched status prints the running daemon's state: its policy and the last
reload's result, the last scan, change and error, a failure to save the
original values restore_on_exit needs, the disks whose original values are
unknown (their record was unreadable), the records of original values (the
daemon's, a probe's) found unreadable and moved aside, warnings (uevent_source = "udev" with no
udevd running), whether the daemon follows its policy files, the time from a
disk's uevent to its settings applied over the last burst (disks applied less
than a second apart: p50, p99, max), the metrics file and its last write's
failure, and every disk a rule matched with the settings made on it and
the writes the kernel refused (retried after a minute, then less and less
often, up to hourly), and for each disk an adaptive rule ([rule.adapt])
follows: the depth its workload runs at now and over the window, the
candidate the probe's curves favour there, the last switch and its reason,
the switches in the last 24 hours, a pin, and why an agreed switch waits. Exit 0 when a daemon runs, 3 when none does (as systemctl
status): a state file whose pid is gone, or is not the daemon that wrote it
(another start time or executable), means none runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := runningState(runtimeDir)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, st)
			}
			return renderStatus(e.stdout, st, all, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "list the disks no rule matched too")
	cmd.Flags().StringVar(&runtimeDir, "runtime-dir", paths.Default.Runtime, "the daemon's runtime directory")
	return cmd
}

// runningState reads the running daemon's state; none running is exit 3,
// as systemctl says.
func runningState(runtimeDir string) (*statefile.State, error) {
	st, err := statefile.Read(runtimeDir)
	if errors.Is(err, statefile.ErrNotRunning) {
		return nil, &ExitError{Code: 3, Msg: err.Error()}
	}
	return st, err
}

func renderStatus(w io.Writer, st *statefile.State, all bool, now time.Time) error {
	st = printableState(st)
	const stamp = "2006-01-02 15:04:05"
	yesNo := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(w, "iosched daemon: running (pid %d) since %s, %s ago\n", st.PID, st.Started.Local().Format(stamp), now.Sub(st.Started).Round(time.Second))
	p := st.Policy
	fmt.Fprintf(w, "policy: %s (uevents: %s, reconcile: %s, restore on exit: %s, follows its files: %s)\n",
		strings.Join(p.Sources, ", "), p.UeventSource, p.ReconcileInterval, yesNo[p.RestoreOnExit], yesNo[st.PolicyFollowed])
	if len(p.SeedErrors) > 0 {
		fmt.Fprintf(w, "seeded probe results: %d error(s), those results not used:\n", len(p.SeedErrors))
		for _, e := range p.SeedErrors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if r := st.LastReload; r != nil {
		if r.OK {
			fmt.Fprintf(w, "last reload: %s, ok\n", r.At.Local().Format(stamp))
		} else {
			fmt.Fprintf(w, "last reload: %s, FAILED: the previous policy is still in force\n", r.At.Local().Format(stamp))
			for _, e := range r.Errors {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
	if s := st.LastScan; s != nil {
		fmt.Fprintf(w, "last scan: %s (%s): %d disks, %d writes, %s\n", s.At.Local().Format(stamp), s.Reason, s.Disks, s.Writes,
			time.Duration(s.Seconds*float64(time.Second)).Round(time.Microsecond))
	}
	if b := st.LastBurst; b != nil {
		more := ""
		if b.Truncated {
			more = ", the latest only"
		}
		fmt.Fprintf(w, "last burst: %s, %d disks%s: uevent to applied p50 %s, p99 %s, max %s\n", b.End.Local().Format(stamp), b.Disks, more,
			seconds(b.P50), seconds(b.P99), seconds(b.Max))
	}
	if m := st.Metrics; m != nil {
		if m.Error != "" {
			fmt.Fprintf(w, "metrics: %s: FAILING: %s\n", m.File, m.Error)
		} else {
			fmt.Fprintf(w, "metrics: %s\n", m.File)
		}
	}
	if c := st.LastChange; c != nil {
		kind := ""
		if c.Drift {
			kind = " (drift repaired)"
		}
		fmt.Fprintf(w, "last change: %s %s %s: %s -> %s (%s)%s\n", c.At.Local().Format(stamp), c.Device, c.Attribute, c.From, c.To, c.Rule, kind)
	} else {
		fmt.Fprintln(w, "last change: none")
	}
	if e := st.LastError; e != nil {
		who := ""
		if e.Device != "" {
			who = e.Device + ": "
		}
		fmt.Fprintf(w, "last error: %s %s%s\n", e.At.Local().Format(stamp), who, e.Message)
	} else {
		fmt.Fprintln(w, "last error: none")
	}
	if e := st.PersistenceError; e != nil {
		fmt.Fprintf(w, "saving state: FAILING since %s: %s\n", e.At.Local().Format(stamp), e.Message)
	}
	if len(st.OriginalsUnknown) > 0 {
		fmt.Fprintf(w, "original values unknown (restore on exit cannot put them back): %s\n", strings.Join(st.OriginalsUnknown, ", "))
	}
	if len(st.OriginalsAside) > 0 {
		fmt.Fprintf(w, "original values records unreadable, moved aside (nothing was restored from them; check those disks by hand): %s\n", strings.Join(st.OriginalsAside, ", "))
	}
	for _, warning := range st.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	fmt.Fprintf(w, "disks: %d managed, %d seen\n", st.Managed, len(st.Disks))

	names := make([]string, 0, len(st.Disks))
	for n, d := range st.Disks {
		if all || len(d.Rules) > 0 || d.LastError != nil || len(d.Refused) > 0 || len(d.InFlight) > 0 || d.Held != nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCLASS\tSETTINGS\tRULES")
	for _, n := range names {
		d := st.Disks[n]
		var set []string
		for _, a := range d.Settings {
			s := a.Attribute + "=" + a.Value
			if a.Want != "" {
				s += " (want " + a.Want + ")"
			}
			set = append(set, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, d.Class, dash(strings.Join(set, " ")), dash(strings.Join(d.Rules, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range names {
		d := st.Disks[n]
		for _, s := range d.Skipped {
			fmt.Fprintf(w, "%s: %s not set: %s\n", n, s.Attribute, s.Reason)
		}
		for _, r := range d.Refused {
			fmt.Fprintf(w, "%s: %s=%s refused since %s (%s); next try %s\n", n, r.Attribute, r.Value, r.Since.Local().Format(stamp), r.Error, r.Retry.Local().Format(stamp))
		}
		if p := d.Probe; p != nil {
			fmt.Fprintf(w, "%s: %s\n", n, probeStatus(p))
		}
		if a := d.Adapt; a != nil {
			for _, line := range adaptStatus(a, now) {
				fmt.Fprintf(w, "%s: %s\n", n, line)
			}
		}
		for _, f := range d.InFlight {
			fmt.Fprintf(w, "%s: write in flight since %s: %s (the disk has not answered it yet)\n", n, f.Since.Local().Format(stamp), f.What)
		}
		if h := d.Held; h != nil {
			fmt.Fprintf(w, "%s: not written since %s: %s\n", n, h.At.Local().Format(stamp), h.Message)
		}
		if e := d.LastError; e != nil {
			fmt.Fprintf(w, "%s: error at %s: %s\n", n, e.At.Local().Format(stamp), e.Message)
		}
	}
	return nil
}

// adaptStatus is an adaptive disk's lines: where its workload runs and
// what the daemon chose by it.
func adaptStatus(a *statefile.AdaptState, now time.Time) []string {
	const stamp = "2006-01-02 15:04:05"
	chosen := a.Scheduler
	if chosen == "" {
		chosen = "the probe's (no switch yet)"
	}
	line := fmt.Sprintf("adapt (rule %q, sample %s, window %s): scheduler %s; busy depth %s now (busy %.0f%%)",
		a.Rule, a.Sample, a.Window, chosen, depthText(a.BusyDepth), a.Busy*100)
	if a.WindowDepth > 0 {
		line += fmt.Sprintf(", %s over the window", depthText(a.WindowDepth))
		if a.Favoured != "" {
			line += fmt.Sprintf(", where the curves favour %s by %.0f%%", a.Favoured, a.Gain*100)
		}
	} else {
		line += fmt.Sprintf(", the window (%s of it seen) idle", time.Duration(a.WindowSeconds*float64(time.Second)).Round(time.Second))
	}
	lines := []string{line}
	if s := a.LastSwitch; s != nil {
		lines = append(lines, fmt.Sprintf("adapt: switched %s -> %s at %s (%s); %d switch(es) in the last 24h",
			s.From, s.To, s.At.Local().Format(stamp), s.Reason, a.SwitchesToday))
	}
	if a.Agreeing != "" && a.AgreeingSince != nil {
		lines = append(lines, fmt.Sprintf("adapt: every sample since %s favours %s", a.AgreeingSince.Local().Format(stamp), a.Agreeing))
	}
	if a.PinnedUntil != nil && a.PinnedUntil.After(now) {
		lines = append(lines, "adapt: pinned by the guard rail until "+a.PinnedUntil.Local().Format(stamp))
	}
	if a.Held != "" {
		lines = append(lines, "adapt: a switch waits: "+a.Held)
	}
	if c := a.GuardCleared; c != nil {
		lines = append(lines, fmt.Sprintf("adapt: the guard rail lifted its pin at %s (%s)", c.At.Local().Format(stamp), c.Reason))
	}
	if a.GuardVerdict != "" {
		lines = append(lines, "adapt: "+a.GuardVerdict)
	}
	return lines
}

// depthText writes a depth as people say it: "23", "1.5".
func depthText(d float64) string {
	if d >= 10 {
		return fmt.Sprintf("%.0f", d)
	}
	return strconv.FormatFloat(math.Round(d*10)/10, 'f', -1, 64)
}

// seconds shows a latency to a precision that suits it.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
