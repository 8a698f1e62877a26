// Command probevsfio measures `iosched probe`'s engines against fio on one
// loop device backed by a file in /dev/shm: the same engine, depth and
// block size, for each scheduler, runs alternating, and prints the ratio of
// IOPS and the CPU each spends per read. contrib/bench/probe-vs-fio.sh runs
// it; see contrib/bench/README.md.
//
// It uses loop number 7390 only (refusing to start when it exists), reads
// the device only (fio --readonly, the probe's O_RDONLY node), and removes
// the device and its backing file on every exit.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/looptest"
)

const loopN = 7390

type config struct {
	engine string // probe's engine name; fio's is the same
	depth  int    // io_uring: iodepth; psync: parallel readers (fio numjobs)
	// fio is how fio is run: "default" (its defaults: one io_uring_enter
	// a read, as the probe's engine submits), "fixedbufs" (the same with
	// registered buffers, as the probe's engine reads), or "batched"
	// (-batched: all free slots submitted at once, up to depth completions
	// reaped a call, registered buffers and file).
	fio string
}

type figure struct {
	iops, cpuPerIO float64
}

func main() {
	iosched := flag.String("iosched", "", "the iosched binary")
	runtime := flag.Duration("runtime", 2*time.Second, "each measurement")
	reps := flag.Int("reps", 3, "repetitions, order alternating")
	size := flag.Int64("size", 512<<20, "backing file size")
	only := flag.String("only", "", "measure only this engine (io_uring or psync)")
	batched := flag.Bool("batched", false, "also run fio's io_uring in batched mode")
	flag.Parse()
	if *iosched == "" {
		fmt.Fprintln(os.Stderr, "probevsfio: -iosched is required")
		os.Exit(2)
	}
	if err := run(*iosched, *runtime, *reps, *size, *only, *batched); err != nil {
		fmt.Fprintln(os.Stderr, "probevsfio:", err)
		os.Exit(1)
	}
}

func run(iosched string, runtime time.Duration, reps int, size int64, only string, batched bool) (err error) {
	name := looptest.Name(loopN)
	if _, err := os.Stat("/sys/block/" + name); err == nil {
		return fmt.Errorf("%s exists already: not ours, not touched", name)
	}
	if err := looptest.AddRaw(loopN); err != nil {
		return fmt.Errorf("LOOP_CTL_ADD %d: %w", loopN, err)
	}
	backing := "/dev/shm/iosched-probevsfio.img"
	cleanup := func() {
		if fd, err := unix.Open("/dev/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
			unix.Close(fd)
		}
		os.Remove(backing)
		if err := looptest.RemoveRaw(loopN); err != nil {
			fmt.Fprintln(os.Stderr, "probevsfio: remove", name, err)
		}
	}
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; cleanup(); os.Exit(1) }()
	if err := bind(name, backing, size); err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "probevsfio-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)

	configs := []config{{"io_uring", 32, "default"}, {"io_uring", 32, "fixedbufs"}, {"psync", 8, "default"}}
	if batched {
		configs = slices.Insert(configs, 2, config{"io_uring", 32, "batched"})
	}
	if only != "" {
		configs = slices.DeleteFunc(configs, func(c config) bool { return c.engine != only })
	}
	scheds := []string{"none", "mq-deadline"}
	type key struct {
		c     config
		sched string
	}
	fio := map[key][]figure{}
	probe := map[key][]figure{}
	ratio := map[key][]float64{}
	for rep := 1; rep <= reps; rep++ {
		for _, c := range configs {
			order := slices.Clone(scheds)
			probeFirst := rep%2 == 0
			if probeFirst {
				slices.Reverse(order)
			}
			var pf map[string]figure
			doProbe := func() error {
				var err error
				pf, err = runProbe(iosched, name, state, c, runtime)
				return err
			}
			if probeFirst {
				if err := doProbe(); err != nil {
					return err
				}
			}
			ff := map[string]figure{}
			for _, s := range order {
				f, err := runFio(name, s, c, runtime)
				if err != nil {
					return err
				}
				ff[s] = f
			}
			if !probeFirst {
				if err := doProbe(); err != nil {
					return err
				}
			}
			for _, s := range scheds {
				k := key{c, s}
				fio[k] = append(fio[k], ff[s])
				probe[k] = append(probe[k], pf[s])
				ratio[k] = append(ratio[k], pf[s].iops/ff[s].iops)
				fmt.Fprintf(os.Stderr, "rep %d %s depth %d (fio %s) %s: fio %.0f IOPS %.2f µs/IO, probe %.0f IOPS %.2f µs/IO (%.2f)\n",
					rep, c.engine, c.depth, c.fio, s, ff[s].iops, ff[s].cpuPerIO, pf[s].iops, pf[s].cpuPerIO, pf[s].iops/ff[s].iops)
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "engine\tdepth\tfio run\tscheduler\tfio IOPS\tprobe IOPS\tprobe/fio (each run)\tfio CPU µs/IO\tprobe CPU µs/IO")
	for _, c := range configs {
		for _, s := range scheds {
			k := key{c, s}
			rs := ""
			for i, r := range ratio[k] {
				if i > 0 {
					rs += " "
				}
				rs += strconv.FormatFloat(r, 'f', 2, 64)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%.0f\t%.2f (%s)\t%.2f\t%.2f\n", c.engine, c.depth, c.fio, s,
				med(fio[k], func(f figure) float64 { return f.iops }), med(probe[k], func(f figure) float64 { return f.iops }),
				median(ratio[k]), rs,
				med(fio[k], func(f figure) float64 { return f.cpuPerIO }), med(probe[k], func(f figure) float64 { return f.cpuPerIO }))
		}
	}
	return tw.Flush()
}

// bind fills the backing file (allocated pages, not a sparse hole, which
// tmpfs reads from one shared zero page) and attaches it read-only.
func bind(name, backing string, size int64) error {
	f, err := os.Create(backing)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
	}
	dev, err := unix.Open("/dev/"+name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY
	copy(cfg.Info.File_name[:], backing)
	return unix.IoctlLoopConfigure(dev, &cfg)
}

func runProbe(iosched, name, state string, c config, runtime time.Duration) (map[string]figure, error) {
	// --depths 1: a curve of depth 1 alone, so that the probe measures
	// depth 1 and then the deep queue, as fio's run is compared with.
	cmd := exec.Command(iosched, "probe", name, "--fresh", "--force", "--state-dir", state, "--json",
		"--candidates", "none,mq-deadline", "--rounds", "1", "--duration", runtime.String(),
		"--depth", strconv.Itoa(c.depth), "--depths", "1", "--engine", c.engine, "--block-size", "4KiB")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("iosched probe: %w", err)
	}
	var rep struct {
		Candidates []struct {
			Scheduler string  `json:"scheduler"`
			IOPS      float64 `json:"iops"`
			CPU       float64 `json:"cpu_us_per_io"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("iosched probe --json: %w", err)
	}
	res := map[string]figure{}
	for _, c := range rep.Candidates {
		res[c.Scheduler] = figure{iops: c.IOPS, cpuPerIO: c.CPU}
	}
	return res, nil
}

func runFio(name, sched string, c config, runtime time.Duration) (figure, error) {
	if err := os.WriteFile(filepath.Join("/sys/block", name, "queue/scheduler"), []byte(sched), 0); err != nil {
		return figure{}, err
	}
	args := []string{"--name=probevsfio", "--filename=/dev/" + name, "--readonly", "--direct=1", "--rw=randread",
		"--bs=4k", "--ioengine=" + c.engine, "--time_based", "--group_reporting", "--output-format=json",
		"--ramp_time=250ms", fmt.Sprintf("--runtime=%dms", runtime.Milliseconds())}
	if c.engine == "psync" {
		args = append(args, "--numjobs="+strconv.Itoa(c.depth), "--thread")
	} else {
		args = append(args, "--iodepth="+strconv.Itoa(c.depth))
	}
	if c.fio == "fixedbufs" {
		args = append(args, "--fixedbufs")
	}
	if c.fio == "batched" {
		d := strconv.Itoa(c.depth)
		args = append(args, "--iodepth_batch_submit="+d, "--iodepth_batch_complete_min=1", "--iodepth_batch_complete_max="+d,
			"--fixedbufs", "--registerfiles")
	}
	cmd := exec.Command("fio", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return figure{}, fmt.Errorf("fio: %w", err)
	}
	var res struct {
		Jobs []struct {
			Read struct {
				IOPS     float64 `json:"iops"`
				TotalIOs float64 `json:"total_ios"`
			} `json:"read"`
			UsrCPU     float64 `json:"usr_cpu"`
			SysCPU     float64 `json:"sys_cpu"`
			JobRuntime float64 `json:"job_runtime"` // ms, summed over jobs
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return figure{}, fmt.Errorf("fio json: %w", err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].Read.TotalIOs == 0 {
		return figure{}, errors.New("fio: no reads reported")
	}
	j := res.Jobs[0]
	// usr_cpu and sys_cpu are percentages of the jobs' runtime.
	cpuUs := (j.UsrCPU + j.SysCPU) / 100 * j.JobRuntime * 1000
	return figure{iops: j.Read.IOPS, cpuPerIO: cpuUs / j.Read.TotalIOs}, nil
}

func med(fs []figure, f func(figure) float64) float64 {
	xs := make([]float64, len(fs))
	for i := range fs {
		xs[i] = f(fs[i])
	}
	return median(xs)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
