package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// cmdBind attaches one backing file, read-only, to every loop of the range
// (LOOP_CONFIGURE): the loops get a size, hence one probe key for all.
func cmdBind(args []string) error {
	fs := flag.NewFlagSet("bind", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	file := fs.String("file", "", "backing file (e.g. a sparse file in /dev/shm)")
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	f, err := os.Open(*file)
	if err != nil {
		return err
	}
	defer f.Close()
	for i := range r.count {
		name := fmt.Sprintf("/dev/loop%d", r.first+i)
		if err := bindLoop(name, f); err != nil {
			return err
		}
	}
	return nil
}

func bindLoop(name string, f *os.File) error {
	var dev int
	var err error
	// the node appears a moment after LOOP_CTL_ADD (devtmpfs)
	for range 400 {
		if dev, err = unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil || !os.IsNotExist(err) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(dev)
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY
	copy(cfg.Info.File_name[:], f.Name())
	if err := unix.IoctlLoopConfigure(dev, &cfg); err != nil {
		return fmt.Errorf("LOOP_CONFIGURE %s: %w", name, err)
	}
	return nil
}

// seedDepths are the depths of the seeded curves; the policy's
// [rule.probe] depths must be these for the seed to serve it.
var seedDepths = []int{1, 2, 8, 32}

// cmdSeed writes a probe-results file ([daemon] probe_results, the shape
// of `iosched probe --export`) with one record for the key of -dev: curves
// for none and mq-deadline that cross (mq-deadline ahead at depths 1-2,
// none at 8-32), measured as the policy's [rule.probe] (psync, depth 32,
// 4 KiB). Every loop bound to the same file shares the key.
func cmdSeed(args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	dev := fs.String("dev", "", "a loop of the range (its key is the record's)")
	out := fs.String("out", "", "the probe-results file to write")
	fs.Parse(args)
	if *dev == "" || *out == "" {
		return fmt.Errorf("-dev and -out are required")
	}
	sys, err := sysfs.NewFS("")
	if err != nil {
		return err
	}
	d, err := sys.Device(*dev)
	if err != nil {
		return err
	}
	curve := func(iops ...float64) []probe.CurvePoint {
		pts := make([]probe.CurvePoint, len(iops))
		for i, v := range iops {
			n := seedDepths[i]
			pts[i] = probe.CurvePoint{Depth: n, ObservedDepth: float64(n), IOPS: v, P50us: 1e6 / v * float64(n), P99us: 2e6 / v * float64(n)}
		}
		return pts
	}
	cand := func(name string, c []probe.CurvePoint) probe.Candidate {
		f := probe.Figures{IOPS: c[len(c)-1].IOPS, P99us: 100, QD1IOPS: c[0].IOPS, QD1P99: 50}
		return probe.Candidate{Scheduler: name, Figures: f, Curve: c,
			Rounds: []probe.RoundFigures{{Round: 1, Position: 1, Figures: f, Curve: c}}}
	}
	dir, err := os.MkdirTemp("", "loopbench-seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st := probe.OpenStore(dir, nil)
	if err := st.Remember(probe.Record{
		Key: probe.KeyOf(sys, d), Device: *dev, At: time.Now().Add(-time.Hour),
		Method: probe.Method{Engine: probe.EnginePsync, Depth: 32, BlockSize: 4096, Depths: seedDepths, Candidates: []string{"none", "mq-deadline"}},
		Rounds: 1,
		Figures: []probe.Candidate{
			cand("none", curve(1000, 1000, 1500, 1500)),
			cand("mq-deadline", curve(1150, 1150, 1000, 1000)),
		},
	}); err != nil {
		return err
	}
	_, err = st.Export(*out)
	return err
}

// cmdAdaptive prints how many disks of a daemon's state file are managed
// and how many have an Adapt entry (are observed by [rule.adapt]).
func cmdAdaptive(args []string) error {
	fs := flag.NewFlagSet("adaptive", flag.ExitOnError)
	state := fs.String("state", "", "the daemon's state.json")
	fs.Parse(args)
	b, err := os.ReadFile(filepath.Clean(*state))
	if err != nil {
		return err
	}
	var s statefile.State
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", *state, err)
	}
	n := 0
	for _, d := range s.Disks {
		if d.Adapt != nil {
			n++
		}
	}
	fmt.Println(s.Managed, n)
	return nil
}

// cmdUnbind detaches the backing file of every loop of the range
// (LOOP_CLR_FD), so that remove can delete them; loops that are gone or
// not bound are skipped.
func cmdUnbind(args []string) error {
	fs := flag.NewFlagSet("unbind", flag.ExitOnError)
	var r loopRange
	r.flags(fs)
	fs.Parse(args)
	if err := r.check(); err != nil {
		return err
	}
	failed := 0
	for i := range r.count {
		name := fmt.Sprintf("/dev/loop%d", r.first+i)
		dev, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !os.IsNotExist(err) && !errors.Is(err, unix.ENXIO) {
				fmt.Fprintf(os.Stderr, "open %s: %v\n", name, err)
				failed++
			}
			continue
		}
		err = unix.IoctlSetInt(dev, unix.LOOP_CLR_FD, 0)
		unix.Close(dev)
		if err != nil && !errors.Is(err, unix.ENXIO) {
			fmt.Fprintf(os.Stderr, "LOOP_CLR_FD %s: %v\n", name, err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d loops not detached", failed)
	}
	return nil
}
