package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cmdCreate creates the loops and nothing else.
// CreateResult is the loops created one after another with nothing
// reacting to them: what creation costs alone, the baseline of the
// hot-plug figures.
type CreateResult struct {
	Count          int     `json:"count"`
	CreateS        float64 `json:"create_s"`
	CPUS           float64 `json:"cpu_s"`
	ForeignUevents int64   `json:"foreign_uevents"`
}

func cmdCreate(args []string) error {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	asJSON := fs.Bool("json", false, "print how long the creation took (CreateResult)")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	seq := seqnum()
	cpu0 := cpuSeconds()
	t0 := time.Now()
	if err := r.create(); err != nil {
		return err
	}
	if !*asJSON {
		return nil
	}
	res := CreateResult{Count: r.count, CreateS: secs(time.Since(t0)), CPUS: cpuSeconds() - cpu0, ForeignUevents: foreign(seq, r.count)}
	return printJSON(res)
}

// SeqResult is the plain sequential writer: the loops created, then their
// scheduler files written one after another by one thread, which is what a
// udev RUN script or tuned does.
type SeqResult struct {
	Count     int     `json:"count"`
	WriteS    float64 `json:"write_s"`
	WriteCPUS float64 `json:"write_cpu_s"`
	Failed    int     `json:"failed"`
	Converged int     `json:"converged"`
}

func cmdSeq(args []string) error {
	fs := flag.NewFlagSet("seq", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler to write")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	if err := r.create(); err != nil {
		return err
	}
	res := SeqResult{Count: r.count}
	cpu0 := cpuSeconds()
	t0 := time.Now()
	for i := range r.count {
		if err := writeAttr(r.attr(i, "queue/scheduler"), *sched); err != nil {
			res.Failed++
		}
	}
	res.WriteS = secs(time.Since(t0))
	res.WriteCPUS = cpuSeconds() - cpu0
	res.Converged = r.converged(*sched)
	return printJSON(res)
}

// WatchResult is how long loops that already exist took to reach the
// scheduler, from a moment given by the caller (a daemon's start).
type WatchResult struct {
	Count int `json:"count"`
	// FirstS is when the first loop was seen converged, ConvergeS the
	// last, both from -since.
	FirstS    float64 `json:"first_s"`
	ConvergeS float64 `json:"converge_s"`
	Converged int     `json:"converged"`
	TimedOut  bool    `json:"timed_out"`
}

// cmdWatch polls every loop's scheduler file until all have sched (in any
// order: tuned walks its devices in hash order).
func cmdWatch(args []string) error {
	fs := flag.NewFlagSet("watch", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	sched := fs.String("sched", "mq-deadline", "scheduler to wait for")
	since := fs.Int64("since", 0, "unix nanoseconds the clock starts at (default: now)")
	poll := fs.Duration("poll", 10*time.Millisecond, "poll interval")
	timeout := fs.Duration("timeout", 180*time.Second, "give up after")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	t0 := time.Now()
	if *since > 0 {
		t0 = time.Unix(0, *since)
	}
	res := WatchResult{Count: r.count}
	done := make([]bool, r.count)
	buf := make([]byte, 4096)
	deadline := time.Now().Add(*timeout)
	for {
		for i := range r.count {
			if done[i] {
				continue
			}
			if b, err := readAttr(r.attr(i, "queue/scheduler"), buf); err == nil && active(b, *sched) {
				done[i] = true
				res.Converged++
				if res.Converged == 1 {
					res.FirstS = secs(time.Since(t0))
				}
			}
		}
		if res.Converged == r.count {
			res.ConvergeS = secs(time.Since(t0))
			return printJSON(res)
		}
		if time.Now().After(deadline) {
			res.TimedOut = true
			return printJSON(res)
		}
		time.Sleep(*poll)
	}
}

// ExecCostResult is what one run of a command costs, the mean of n runs:
// wall time and CPU (user+system) of the process.
type ExecCostResult struct {
	Runs  int     `json:"runs"`
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	// MaxRSSKiB is the largest peak resident size of a run.
	MaxRSSKiB int64 `json:"max_rss_kib"`
}

// cmdExecCost runs a command n times, one after another, and reports the
// mean cost of a run: what a udev RUN+= program costs per event.
func cmdExecCost(args []string) error {
	fs := flag.NewFlagSet("execcost", flag.ExitOnError)
	n := fs.Int("n", 20, "runs")
	fs.Parse(args)
	argv := fs.Args()
	if len(argv) == 0 {
		return fmt.Errorf("usage: loopbench execcost [-n N] -- COMMAND [ARGS]")
	}
	res := ExecCostResult{Runs: *n}
	var wall time.Duration
	var cpu float64
	for range *n {
		cmd := exec.Command(argv[0], argv[1:]...)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
		}
		wall += time.Since(t0)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		res.MaxRSSKiB = max(res.MaxRSSKiB, ru.Maxrss)
	}
	res.WallS = secs(wall) / float64(*n)
	res.CPUS = cpu / float64(*n)
	return printJSON(res)
}

// Comparison is the summary of `run.sh compare`: for each way of setting
// the scheduler, the time from the moment it can act to the last of N
// loop devices converged, for each N.
type Comparison struct {
	Time     string            `json:"time"`
	Info     map[string]string `json:"info"`
	Sizes    []int             `json:"sizes"`
	Series   []Series          `json:"series"`
	Extra    map[string]string `json:"extra"`
	Warnings []string          `json:"warnings"`
}

// Series is one way of doing it: seconds per size (0: not measured).
type Series struct {
	Key     string    `json:"key"`
	Label   string    `json:"label"`
	Seconds []float64 `json:"seconds"`
}

// seriesLabels are the ways compared, in the order drawn, and how the
// figure names them.
func seriesLabels() [][2]string {
	return [][2]string{
		{"raw", "raw limit: all files written at once, a thread each"},
		{"iosched", "iosched daemon"},
		{"udevd_attr", `systemd-udevd, ATTR{queue/scheduler} rule`},
		{"udevd_run", `systemd-udevd, RUN+="iosched apply" (contrib/udev)`},
		{"seq", "plain sequential writer (a RUN script)"},
		{"tuned", "tuned, [disk] elevator= (at its start)"},
	}
}

// cmdCompare reads compare.txt ("KEY N SECONDS" lines, and "info KEY
// VALUE" / "extra KEY VALUE" lines) from -dir, writes the summary JSON and
// draws the figure next to it (same name, .svg and .png).
func cmdCompare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	dir := fs.String("dir", "", "work directory holding compare.txt")
	out := fs.String("out", "", "summary JSON to write; the figure goes beside it")
	fs.Parse(args)
	f, err := os.Open(filepath.Join(*dir, "compare.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	c := Comparison{Time: time.Now().UTC().Format(time.RFC3339), Info: map[string]string{}, Extra: map[string]string{}}
	values := map[string]map[int]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case fields[0] == "info" && len(fields) >= 3:
			c.Info[fields[1]] = strings.Join(fields[2:], " ")
		case fields[0] == "extra" && len(fields) >= 3:
			c.Extra[fields[1]] = strings.Join(fields[2:], " ")
		case fields[0] == "warning":
			c.Warnings = append(c.Warnings, strings.Join(fields[1:], " "))
		case len(fields) == 3:
			n, err1 := strconv.Atoi(fields[1])
			s, err2 := strconv.ParseFloat(fields[2], 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("compare.txt: bad line %q", sc.Text())
			}
			if values[fields[0]] == nil {
				values[fields[0]] = map[int]float64{}
			}
			values[fields[0]][n] = s
			if !slices.Contains(c.Sizes, n) {
				c.Sizes = append(c.Sizes, n)
			}
		default:
			return fmt.Errorf("compare.txt: bad line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	slices.Sort(c.Sizes)
	for _, kl := range seriesLabels() {
		v, ok := values[kl[0]]
		if !ok {
			continue
		}
		s := Series{Key: kl[0], Label: kl[1]}
		for _, n := range c.Sizes {
			s.Seconds = append(s.Seconds, v[n])
		}
		c.Series = append(c.Series, s)
		delete(values, kl[0])
	}
	for k := range values {
		return fmt.Errorf("compare.txt: unknown series %q", k)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	base := strings.TrimSuffix(*out, filepath.Ext(*out))
	if err := drawComparison(c, base+".svg", base+".png"); err != nil {
		return err
	}
	printComparison(c)
	return nil
}

func printComparison(c Comparison) {
	fmt.Printf("%-58s", "seconds to converge, N loop devices at once")
	for _, n := range c.Sizes {
		fmt.Printf(" %9d", n)
	}
	fmt.Println()
	for _, s := range c.Series {
		fmt.Printf("%-58s", s.Label)
		for _, v := range s.Seconds {
			fmt.Printf(" %9.3f", v)
		}
		fmt.Println()
	}
	for _, k := range slices.Sorted(maps.Keys(c.Extra)) {
		fmt.Printf("%s: %s\n", k, c.Extra[k])
	}
	for _, w := range c.Warnings {
		fmt.Println("WARNING:", w)
	}
}
