package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// cmdJget prints one field of a JSON file, a dotted path ("last_scan.seconds").
func cmdJget(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: loopbench jget FILE PATH")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	for _, k := range strings.Split(args[1], ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: no %s", args[0], args[1])
		}
		if v, ok = m[k]; !ok {
			return fmt.Errorf("%s: no %s", args[0], args[1])
		}
	}
	switch v := v.(type) {
	case string:
		fmt.Println(v)
	case float64:
		fmt.Println(strconv.FormatFloat(v, 'f', -1, 64))
	default:
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
	}
	return nil
}

// metrics is every figure of a run: run.sh's "name value" lines and the
// numeric fields of the helpers' JSON files, as "file.field".
type metrics map[string]float64

func loadMetrics(dir string) (metrics, map[string]string, error) {
	m := metrics{}
	info := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "metrics.txt"))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = x
		} else {
			info[k] = v
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		var obj map[string]any
		if json.Unmarshal(b, &obj) != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		for k, v := range obj {
			switch v := v.(type) {
			case float64:
				m[name+"."+k] = v
			case bool:
				if v {
					m[name+"."+k] = 1
				} else {
					m[name+"."+k] = 0
				}
			}
		}
	}
	return m, info, sc.Err()
}

func (m metrics) get(k string) (float64, bool) {
	v, ok := m[k]
	return v, ok
}

// Target is one of the daemon's speed and size figures against its bound.
type Target struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Bound string  `json:"bound"`
	// Result is "pass", "FAIL", or "n/a" when the run could not judge
	// (an idle window that was not idle on a shared machine).
	Result string `json:"result"`
}

// Summary is the machine-readable result of a run.
type Summary struct {
	Time    time.Time          `json:"time"`
	Kernel  string             `json:"kernel"`
	CPUs    int                `json:"cpus"`
	Loops   int                `json:"loops"`
	Info    map[string]string  `json:"info"`
	Metrics metrics            `json:"metrics"`
	Ratios  map[string]float64 `json:"ratios"`
	Targets []Target           `json:"targets"`
	// Idle is idle.json as it is, per-second samples included.
	Idle json.RawMessage `json:"idle,omitempty"`
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	dir := fs.String("dir", "", "the run's work directory")
	out := fs.String("out", "", "where to write the summary JSON")
	fs.Parse(args)
	m, info, err := loadMetrics(*dir)
	if err != nil {
		return err
	}
	s := Summary{Time: time.Now().UTC().Round(time.Second), Info: info, Metrics: m, Ratios: map[string]float64{}}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(*dir, "idle.json")); err == nil && json.Valid(b) {
		s.Idle = b
	}
	s.CPUs = int(m["cpus"])
	s.Loops = int(m["loops"])

	ratio := func(name, a, b string) {
		x, ok1 := m.get(a)
		y, ok2 := m.get(b)
		if ok1 && ok2 && y > 0 {
			s.Ratios[name] = x / y
		}
	}
	ratio("daemon_burst/raw_write", "daemon_burst.converge_s", "raw_write_s")
	ratio("daemon_burst/udevd_burst", "daemon_burst.converge_s", "udevd_burst.converge_s")
	ratio("daemon_hotplug/raw_hotplug", "daemon_hotplug.converge_s", "rawhotplug.converge_s")
	ratio("daemon_hotplug/udevd_hotplug", "daemon_hotplug.converge_s", "udevd_hotplug.converge_s")
	ratio("daemon_burst_cpu/raw_write_cpu", "daemon_burst_cpu_s", "raw.write_cpu_s")
	ratio("daemon_hotplug_after_create/udevd", "daemon_hotplug.after_create_s", "udevd_hotplug.after_create_s")

	target := func(what string, v float64, ok bool, bound string, pass bool) {
		if !ok {
			return
		}
		res := "FAIL"
		if pass {
			res = "pass"
		}
		s.Targets = append(s.Targets, Target{What: what, Value: v, Bound: bound, Result: res})
	}
	if r, ok := s.Ratios["daemon_burst/raw_write"]; ok {
		target("1000 at once: daemon / raw parallel write", r, true, "<= 1.5", r <= 1.5)
	}
	if r, ok := s.Ratios["daemon_burst/udevd_burst"]; ok {
		target("1000 at once: daemon / udevd", r, true, "<= 0.5", r <= 0.5)
	}
	// The hot-plug figures are not judged: there every daemon follows the
	// creation, which takes longer than the switches (see README).
	v, ok := m.get("rescan_best_s")
	target("rescan of 1000 in policy: best seconds", v, ok, "< 0.050", v < 0.050)
	v, ok = m.get("rescan_median_s")
	target("rescan of 1000 in policy: median seconds", v, ok, "< 0.050", v < 0.050)
	v, ok = m.get("rescan_writes")
	target("rescan of 1000 in policy: writes", v, ok, "== 0", v == 0)
	v, ok = m.get("rss_kib")
	target("VmRSS KiB, 1000 managed", v, ok, "< 20480", v < 20480)
	v, ok = m.get("hwm_kib")
	target("VmHWM KiB (peak, during the bursts)", v, ok, "< 20480", v < 20480)
	v, ok = m.get("idle.quiet_ticks")
	target(fmt.Sprintf("idle CPU ticks in %g quiet seconds", m["idle.quiet_seconds"]), v, ok, "== 0", v == 0)
	if ok && m["idle.quiet_seconds"] == 0 {
		// Others' devices came and went all the time: no idle second.
		s.Targets[len(s.Targets)-1].Result = "n/a"
	}

	if *out != "" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	printTable(os.Stdout, s)
	return nil
}

func printTable(w io.Writer, s Summary) {
	m := s.Metrics
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(what string, keys ...string) {
		cells := []string{what}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				cells = append(cells, fmtNum(k, v))
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	fmt.Fprintf(w, "iosched benchmark: %d loop devices, %d CPUs, kernel %s, %s\n\n", s.Loops, s.CPUs, s.Kernel, s.Time.Format(time.RFC3339))
	fmt.Fprintln(tw, "SCHEDULER SWITCH OF 1000 LOOPS\tCONVERGED (s)\tCREATE (s)\tAFTER LAST CREATE (s)\tCPU (s)\tFOREIGN UEVENTS")
	row("raw: all written in parallel (loops present)", "raw_write_s", "raw.create_s", "-", "raw.write_cpu_s", "raw.foreign_uevents")
	row("raw: written as each is created", "rawhotplug.converge_s", "rawhotplug.create_s", "-", "rawhotplug.cpu_s", "rawhotplug.foreign_uevents")
	row("iosched daemon: 1000 at once (SIGSTOP, create, SIGCONT)", "daemon_burst.converge_s", "daemon_burst.create_s", "-", "daemon_burst_cpu_s", "daemon_burst.foreign_uevents")
	row("iosched daemon: 1000 hot-plugged", "daemon_hotplug.converge_s", "daemon_hotplug.create_s", "daemon_hotplug.after_create_s", "daemon_hotplug_cpu_s", "daemon_hotplug.foreign_uevents")
	row("systemd-udevd: 1000 at once (SIGSTOP, create, SIGCONT)", "udevd_burst.converge_s", "udevd_burst.create_s", "-", "udevd_burst_cpu_s", "udevd_burst.foreign_uevents")
	row("systemd-udevd: 1000 hot-plugged", "udevd_hotplug.converge_s", "udevd_hotplug.create_s", "udevd_hotplug.after_create_s", "udevd_hotplug_cpu_s", "udevd_hotplug.foreign_uevents")
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "OTHER\tVALUE")
	row("raw parallel write, each measurement (s)", "raw_write_1_s", "raw_write_2_s")
	row("daemon log: last 'set', burst / hot-plug (s from start)", "daemon_burst_log.last_set_s", "daemon_hotplug_log.last_set_s")
	row("daemon ready after start, all disks scanned (s)", "daemon_ready_s")
	row("rescan of 1000 in policy (SIGUSR1): best, median (s)", "rescan_best_s", "rescan_median_s")
	row("rescan: disks, writes, 'set' log lines", "rescan_disks", "rescan_writes", "rescan_log_sets")
	row("iosched apply, no-op on the 1000 (process, s)", "apply_noop_s")
	row("udevd re-trigger 'change' of 1000 already set + settle (s)", "udevd_retrigger_s")
	row("daemon VmRSS, RssAnon, RssFile (KiB), threads; 1000 managed", "rss_kib", "rss_anon_kib", "rss_file_kib", "threads")
	row("daemon VmRSS (KiB), threads; 1000 managed, settled after the idle watch", "rss_settled_kib", "threads_settled")
	row("daemon VmHWM (KiB): after the burst, at the end", "hwm_after_burst_kib", "hwm_kib")
	row("daemon idle: quiet seconds, CPU ticks (1/100 s) and context switches in them", "idle.quiet_seconds", "idle.quiet_ticks", "idle.quiet_switches")
	row("idle watch: seconds in all, CPU ticks in all, uevents heard (all, block)", "idle.seconds", "idle.all_ticks", "idle.uevents", "idle.block_uevents")
	row("daemon stop (SIGTERM to exit, s)", "daemon_stop_s")
	row("daemon log: WARN/ERROR lines, rescans after lost uevents", "daemon_log_warnings", "daemon_lost_uevents")
	tw.Flush()
	fmt.Fprintln(w)
	keys := make([]string, 0, len(s.Ratios))
	for k := range s.Ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(tw, "RATIO\tVALUE")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%.2f\n", k, s.Ratios[k])
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "TARGET\tVALUE\tBOUND\tRESULT")
	for _, t := range s.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.What, strconv.FormatFloat(round(t.Value), 'f', -1, 64), t.Bound, t.Result)
	}
	tw.Flush()
}

func round(v float64) float64 { return math.Round(v*1e4) / 1e4 }

func fmtNum(k string, v float64) string {
	if strings.HasSuffix(k, "_s") {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(round(v), 'f', -1, 64)
}
