// Command diskemu emulates a cloud disk behind a real loop device, to try
// iosched's probe, advise and adaptive rules on the disk kinds a cloud
// has without one (see README.md):
//
//	sudo go run ./contrib/diskemu --profile network-ssd --loop 7390
//
// It serves until interrupted, then removes the loop device and unmounts.
// It only reads: the disk is a file of zeros that no write reaches.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/iosched/iosched/internal/diskemu"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "diskemu:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	var (
		name     = flag.String("profile", "", "the disk to emulate (--list shows them)")
		spec     = flag.String("profile-json", "", "a profile as JSON (diskemu.Profile), instead of --profile")
		slow     = flag.Float64("slow", 1, "serve the profile `k` times slower (times x k, rates / k)")
		loop     = flag.Int("loop", 0, "create loop device `N` (>= 1000) over the disk; 0: only mount the file")
		size     = flag.Int64("size", 8<<30, "the disk's size in bytes")
		dir      = flag.String("dir", "", "mount point for the disk's file (default: a new temporary directory)")
		list     = flag.Bool("list", false, "list the profiles and their modelled 4 KiB random-read IOPS, then exit")
		lifeline = flag.Bool("exit-on-stdin-eof", false, "stop when standard input closes (for a parent that may die)")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if *list {
		return listProfiles(os.Stdout, *slow)
	}
	p, err := profile(*name, *spec)
	if err != nil {
		return err
	}
	if *slow <= 0 {
		return fmt.Errorf("--slow %g: want a factor above 0", *slow)
	}
	p = p.Slowed(*slow)
	if *size < 4096 {
		return fmt.Errorf("--size %d: want at least 4096 bytes", *size)
	}
	disk, err := diskemu.New(p, *size)
	if err != nil {
		return err
	}
	defer disk.Close() // after the unmount: no read comes any more
	mnt := *dir
	if mnt == "" {
		if mnt, err = os.MkdirTemp("", "diskemu-"); err != nil {
			return err
		}
		defer os.Remove(mnt)
	}
	server, err := diskemu.Mount(mnt, disk)
	if err != nil {
		return fmt.Errorf("mount %s (needs root and /dev/fuse): %w", mnt, err)
	}
	defer server.Unmount()
	file := filepath.Join(mnt, diskemu.FileName)
	where := file
	if *loop != 0 {
		if err := diskemu.Attach(*loop, file); err != nil {
			return err
		}
		defer func() {
			if derr := diskemu.Detach(*loop); derr != nil {
				err = errors.Join(err, derr)
			}
		}()
		where = fmt.Sprintf("/dev/loop%d", *loop)
		if len(p.Overhead) > 0 {
			// The reads' overhead follows the loop's scheduler.
			follow := make(chan struct{})
			followed := make(chan struct{})
			go func() {
				defer close(followed)
				diskemu.FollowScheduler(disk, fmt.Sprintf("/sys/block/loop%d", *loop), 10*time.Millisecond, follow)
			}()
			defer func() { close(follow); <-followed }()
		}
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	stop := make(chan struct{})
	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		if *lifeline {
			close(stop)
		}
	}()
	fmt.Printf("ready %s %s (%s)\n", where, file, p.Name)
	for {
		select {
		case line := <-cmds:
			fmt.Println(command(disk, line))
		case <-stop:
			return nil
		case s := <-sig:
			if s != syscall.SIGUSR1 {
				st := disk.Stats()
				fmt.Println("stopped", stats(st))
				return nil
			}
			// SIGUSR1: report, then a new disk's full buckets.
			st := disk.Stats()
			disk.Refill()
			fmt.Println("refilled", stats(st))
		}
	}
}

// command carries out a line of standard input and returns the line to
// print: "credits N" leaves N burst credits (0: the credits run out now)
// and answers "credits LEFT"; anything else answers "error ...".
func command(disk *diskemu.Disk, line string) string {
	f := strings.Fields(line)
	if len(f) == 2 && f[0] == "credits" {
		n, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return fmt.Sprintf("error credits %q: not a number", f[1])
		}
		left, err := disk.SetCredits(n)
		if err != nil {
			return "error " + err.Error()
		}
		return fmt.Sprintf("credits %g", left)
	}
	return fmt.Sprintf("error unknown command %q (known: credits N)", line)
}

func profile(name, spec string) (diskemu.Profile, error) {
	switch {
	case name != "" && spec != "":
		return diskemu.Profile{}, errors.New("--profile and --profile-json: give one")
	case spec != "":
		var p diskemu.Profile
		dec := json.NewDecoder(strings.NewReader(spec))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return p, fmt.Errorf("--profile-json: %w", err)
		}
		return p, p.Validate()
	case name != "":
		return diskemu.Lookup(name)
	}
	return diskemu.Profile{}, errors.New("no --profile (--list shows them)")
}

func listProfiles(w io.Writer, slow float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "profile\tsteady IOPS at depth 1\t4\t16\t64\tbursts last (depth 16)\twhat it stands for")
	for _, p := range diskemu.Profiles {
		p := p.Slowed(slow)
		fmt.Fprintf(tw, "%s", p.Name)
		for _, d := range []int{1, 4, 16, 64} {
			fmt.Fprintf(tw, "\t%.0f", p.Model(d, 4096, 0, 0))
		}
		credits := "-"
		if last := p.CreditsLast(16, 0); last > 0 {
			credits = last.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "\t%s\t%s\n", credits, p.About)
	}
	return tw.Flush()
}

func stats(st diskemu.Stats) string {
	return fmt.Sprintf("reads=%d inside_ns=%d peak_in_service=%d", st.Reads, st.Inside.Nanoseconds(), st.PeakInService)
}
