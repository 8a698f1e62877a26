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
	"slices"
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
	Time    time.Time         `json:"time"`
	Kernel  string            `json:"kernel"`
	CPUs    int               `json:"cpus"`
	Loops   int               `json:"loops"`
	Rounds  int               `json:"rounds"`
	Daemons []string          `json:"daemons"`
	Info    map[string]string `json:"info"`
	Metrics metrics           `json:"metrics"`
	// Medians are the rounds' figures, "WAY.figure" (WAY: create,
	// rawhotplug, raw, or a daemon build's "NAME_hotplug",
	// "NAME_burst"): the median of the rounds, for the table.
	Medians map[string]float64 `json:"medians"`
	// Ratios are medians of the rounds' ratios, each taken within one
	// round ("NAME: hotplug_create/rawhotplug_create", ...).
	Ratios map[string]float64 `json:"ratios"`
	// RoundRatios are each round's ratio, in round order.
	RoundRatios map[string][]float64 `json:"round_ratios"`
	Targets     []Target             `json:"targets"`
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
	s := summarize(m, info)
	s.Time = time.Now().UTC().Round(time.Second)
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(*dir, "idle.json")); err == nil && json.Valid(b) {
		s.Idle = b
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

// The targets' bounds.
const (
	maxHotplugCreate   = 1.05 // creation with the daemon / with the raw writer
	maxHotplugConverge = 1.10 // converged, hot-plugged: daemon / raw writer
	maxBurstConverge   = 1.30 // 1000 at once: daemon / raw parallel write
	maxBurstCPU        = 1.40 // 1000 at once: daemon's CPU / the raw writer's
	maxPeakKiB         = 18 * 1024
	maxRSSKiB          = 20 * 1024
	maxRescanS         = 0.050
	maxUdevdRatio      = 0.5 // 1000 at once: daemon / systemd-udevd
)

// roundKey is a figure of round r: "r<r>_<name>".
func roundKey(r int, name string) string { return "r" + strconv.Itoa(r) + "_" + name }

// summarize computes the medians, the ratios within each round and their
// medians, and judges the targets on the build "iosched".
func summarize(m metrics, info map[string]string) Summary {
	s := Summary{Info: info, Metrics: m, Medians: map[string]float64{}, Ratios: map[string]float64{}, RoundRatios: map[string][]float64{}}
	s.CPUs = int(m["cpus"])
	s.Loops = int(m["loops"])
	s.Rounds = int(m["reps"])
	if d := info["daemons"]; d != "" {
		s.Daemons = strings.Split(d, ",")
	}

	// figure is the rounds' values of one figure, in round order; a round
	// that lacks it is left out.
	figure := func(key string) []float64 {
		var vs []float64
		for r := 1; r <= s.Rounds; r++ {
			if v, ok := m[roundKey(r, key)]; ok {
				vs = append(vs, v)
			}
		}
		return vs
	}
	median := func(name, key string) {
		if vs := figure(key); len(vs) > 0 {
			s.Medians[name] = medianOf(vs)
		}
	}
	// ratio is a/b within each round that has both, and their median.
	ratio := func(name, a, b string) (float64, bool) {
		var vs []float64
		for r := 1; r <= s.Rounds; r++ {
			x, ok1 := m[roundKey(r, a)]
			y, ok2 := m[roundKey(r, b)]
			if ok1 && ok2 && y > 0 {
				vs = append(vs, x/y)
			}
		}
		if len(vs) == 0 {
			return 0, false
		}
		s.RoundRatios[name] = vs
		s.Ratios[name] = medianOf(vs)
		return s.Ratios[name], true
	}
	for _, k := range []string{"create.create_s", "create.cpu_s", "rawhotplug.create_s", "rawhotplug.converge_s", "rawhotplug.cpu_s", "raw.create_s", "raw.write_s", "raw.write_cpu_s"} {
		median(k, k)
	}
	ratio("rawhotplug_create/create", "rawhotplug.create_s", "create.create_s")
	for _, d := range s.Daemons {
		median(d+"_hotplug.create_s", d+"_hotplug.create_s")
		median(d+"_hotplug.converge_s", d+"_hotplug.converge_s")
		median(d+"_hotplug.cpu_s", d+"_hotplug_cpu_s")
		median(d+"_burst.converge_s", d+"_burst.converge_s")
		median(d+"_burst.cpu_s", d+"_burst_cpu_s")
		median(d+"_burst.last_set_s", d+"_burst_log.last_set_s")
		if vs := figure(d + "_hwm_kib"); len(vs) > 0 {
			s.Medians[d+"_burst.peak_kib"] = slices.Max(vs)
		}
		ratio(d+": hotplug_create/create", d+"_hotplug.create_s", "create.create_s")
		ratio(d+": hotplug_create/rawhotplug_create", d+"_hotplug.create_s", "rawhotplug.create_s")
		ratio(d+": hotplug_converge/rawhotplug_converge", d+"_hotplug.converge_s", "rawhotplug.converge_s")
		ratio(d+": burst_converge/raw_write", d+"_burst.converge_s", "raw.write_s")
		ratio(d+": burst_cpu/raw_write_cpu", d+"_burst_cpu_s", "raw.write_cpu_s")
		// floor (cmd/floor) writes on each add uevent and does nothing
		// else: these ratios are what a build costs beyond any uevent-driven
		// tool's reaction.
		if d != "floor" && slices.Contains(s.Daemons, "floor") {
			ratio(d+": hotplug_create/floor_hotplug_create", d+"_hotplug.create_s", "floor_hotplug.create_s")
			ratio(d+": hotplug_converge/floor_hotplug_converge", d+"_hotplug.converge_s", "floor_hotplug.converge_s")
			ratio(d+": burst_converge/floor_burst_converge", d+"_burst.converge_s", "floor_burst.converge_s")
			ratio(d+": burst_cpu/floor_burst_cpu", d+"_burst_cpu_s", "floor_burst_cpu_s")
		}
	}

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
	bound := func(x float64) string { return "<= " + strconv.FormatFloat(x, 'f', -1, 64) }
	r, ok := s.Ratios["iosched: hotplug_create/rawhotplug_create"]
	target("hot-plugged: creation with the daemon / with the raw writer", r, ok, bound(maxHotplugCreate), r <= maxHotplugCreate)
	r, ok = s.Ratios["iosched: hotplug_converge/rawhotplug_converge"]
	target("hot-plugged: converged, daemon / raw writer", r, ok, bound(maxHotplugConverge), r <= maxHotplugConverge)
	r, ok = s.Ratios["iosched: burst_converge/raw_write"]
	target("1000 at once: converged, daemon / raw parallel write", r, ok, bound(maxBurstConverge), r <= maxBurstConverge)
	r, ok = s.Ratios["iosched: burst_cpu/raw_write_cpu"]
	target("1000 at once: CPU, daemon / raw parallel writer", r, ok, bound(maxBurstCPU), r <= maxBurstCPU)
	if x, ok1 := s.Medians["iosched_burst.converge_s"]; ok1 {
		if y, ok2 := m["udevd_burst.converge_s"]; ok2 && y > 0 {
			s.Ratios["iosched: burst_converge/udevd_burst"] = x / y
			target("1000 at once: daemon / systemd-udevd", x/y, true, bound(maxUdevdRatio), x/y <= maxUdevdRatio)
		}
	}
	// The peak of every run of the build judged: each round's daemon and
	// the one measured at rest.
	peak, ok := m["hwm_kib"]
	if vs := figure("iosched_hwm_kib"); len(vs) > 0 {
		peak, ok = max(peak, slices.Max(vs)), true
	}
	target("VmHWM KiB, peak of every run (1000 disks)", peak, ok, "<= "+strconv.Itoa(maxPeakKiB), peak <= maxPeakKiB)
	v, ok := m["rss_kib"]
	target("VmRSS KiB, 1000 managed", v, ok, "< "+strconv.Itoa(maxRSSKiB), v < maxRSSKiB)
	v, ok = m["rescan_best_s"]
	target("rescan of 1000 in policy: best seconds", v, ok, "< 0.050", v < maxRescanS)
	v, ok = m["rescan_median_s"]
	target("rescan of 1000 in policy: median seconds", v, ok, "< 0.050", v < maxRescanS)
	v, ok = m["rescan_writes"]
	target("rescan of 1000 in policy: writes", v, ok, "== 0", v == 0)
	v, ok = m["idle.quiet_ticks"]
	target(fmt.Sprintf("idle CPU ticks in %g quiet seconds", m["idle.quiet_seconds"]), v, ok, "== 0", v == 0)
	if ok && m["idle.quiet_seconds"] == 0 {
		// Others' devices came and went all the time: no idle second.
		s.Targets[len(s.Targets)-1].Result = "n/a"
	}
	return s
}

func medianOf(vs []float64) float64 {
	x := slices.Clone(vs)
	sort.Float64s(x)
	if n := len(x); n%2 == 1 {
		return x[n/2]
	} else {
		return (x[n/2-1] + x[n/2]) / 2
	}
}

func printTable(w io.Writer, s Summary) {
	m := s.Metrics
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// cell is the median of a rounds' figure and each round's value.
	cell := func(med string, key string) string {
		v, ok := s.Medians[med]
		if !ok {
			return "-"
		}
		out := fmtNum(med, v)
		var each []string
		for r := 1; r <= s.Rounds; r++ {
			if x, ok := m[roundKey(r, key)]; ok {
				each = append(each, fmtNum(key, x))
			}
		}
		if len(each) > 1 {
			out += " (" + strings.Join(each, " ") + ")"
		}
		return out
	}
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
	fmt.Fprintf(w, "iosched benchmark: %d loop devices, %d CPUs, kernel %s, %s, %d rounds\n\n", s.Loops, s.CPUs, s.Kernel, s.Time.Format(time.RFC3339), s.Rounds)
	fmt.Fprintln(tw, "1000 LOOPS, MEDIAN OF THE ROUNDS (EACH ROUND)\tCREATED (s)\tCONVERGED (s)\tCPU (s)\tPEAK VmHWM (KiB)")
	fmt.Fprintf(tw, "created one after another, nothing reacting\t%s\t-\t%s\t-\n", cell("create.create_s", "create.create_s"), cell("create.cpu_s", "create.cpu_s"))
	fmt.Fprintf(tw, "raw: each written by the creator as it is created\t%s\t%s\t%s\t-\n", cell("rawhotplug.create_s", "rawhotplug.create_s"), cell("rawhotplug.converge_s", "rawhotplug.converge_s"), cell("rawhotplug.cpu_s", "rawhotplug.cpu_s"))
	fmt.Fprintf(tw, "raw: all written at once, loops present\t%s\t%s\t%s\t-\n", cell("raw.create_s", "raw.create_s"), cell("raw.write_s", "raw.write_s"), cell("raw.write_cpu_s", "raw.write_cpu_s"))
	for _, d := range s.Daemons {
		fmt.Fprintf(tw, "%s daemon: hot-plugged\t%s\t%s\t%s\t-\n", d, cell(d+"_hotplug.create_s", d+"_hotplug.create_s"), cell(d+"_hotplug.converge_s", d+"_hotplug.converge_s"), cell(d+"_hotplug.cpu_s", d+"_hotplug_cpu_s"))
		fmt.Fprintf(tw, "%s daemon: 1000 at once (SIGSTOP, create, SIGCONT)\t-\t%s\t%s\t%s\n", d, cell(d+"_burst.converge_s", d+"_burst.converge_s"), cell(d+"_burst.cpu_s", d+"_burst_cpu_s"), fmtNum("", s.Medians[d+"_burst.peak_kib"]))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, d := range s.Daemons {
		if a := s.Info["also_"+d]; a != "" {
			fmt.Fprintf(w, "%s: %s\n", d, a)
		}
	}
	fmt.Fprintln(tw, "SYSTEMD-UDEVD, ONCE\tCONVERGED (s)\tCREATE (s)\tAFTER LAST CREATE (s)\tCPU (s)\tFOREIGN UEVENTS")
	row("systemd-udevd: 1000 at once (SIGSTOP, create, SIGCONT)", "udevd_burst.converge_s", "udevd_burst.create_s", "-", "udevd_burst_cpu_s", "udevd_burst.foreign_uevents")
	row("systemd-udevd: 1000 hot-plugged", "udevd_hotplug.converge_s", "udevd_hotplug.create_s", "udevd_hotplug.after_create_s", "udevd_hotplug_cpu_s", "udevd_hotplug.foreign_uevents")
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "OTHER\tVALUE")
	foreign := 0.0
	for k, v := range m {
		if strings.HasSuffix(k, ".foreign_uevents") {
			foreign += v
		}
	}
	fmt.Fprintf(tw, "foreign uevents during the rounds' measurements (others' devices)\t%g\n", foreign)
	for _, d := range s.Daemons {
		if v, ok := s.Medians[d+"_burst.last_set_s"]; ok {
			fmt.Fprintf(tw, "%s daemon log: last 'set' of the burst, median (s after SIGCONT)\t%s\n", d, fmtNum("_s", v))
		}
	}
	row("daemon ready after start, all disks scanned (s)", "daemon_ready_s")
	row("rescan of 1000 in policy (SIGUSR1): best, median (s)", "rescan_best_s", "rescan_median_s")
	row("rescan: disks, writes, 'set' log lines", "rescan_disks", "rescan_writes", "rescan_log_sets")
	row("iosched apply, no-op on the 1000 (process, s)", "apply_noop_s")
	row("udevd re-trigger 'change' of 1000 already set + settle (s)", "udevd_retrigger_s")
	row("daemon VmRSS, RssAnon, RssFile (KiB), threads; 1000 managed", "rss_kib", "rss_anon_kib", "rss_file_kib", "threads")
	row("daemon VmRSS (KiB), threads; 1000 managed, settled after the idle watch", "rss_settled_kib", "threads_settled")
	row("daemon VmHWM (KiB) at rest, after a burst and the rescans", "hwm_kib")
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
	fmt.Fprintln(tw, "RATIO (MEDIAN OF THE ROUNDS' RATIOS)\tVALUE\tEACH ROUND")
	for _, k := range keys {
		var each []string
		for _, v := range s.RoundRatios[k] {
			each = append(each, strconv.FormatFloat(v, 'f', 2, 64))
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\n", k, s.Ratios[k], strings.Join(each, " "))
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
