package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// IdleResult is a process's CPU while nothing happens. On a machine others
// share, devices come and go all the time, and the process rightly works
// then; so the CPU is sampled every second while listening to uevents, and
// only seconds with no uevent in them, in the second after, nor in the five
// before count as idle: what events cause may take a while (a burst of
// others' devices that overflows the socket makes iosched rescan every disk,
// 3 s for 3000 disks here; and it ends the threads a burst left behind a
// second after it).
type IdleResult struct {
	Seconds      int   `json:"seconds"`       // sampled in all
	QuietSeconds int   `json:"quiet_seconds"` // counted as idle
	QuietTicks   int64 `json:"quiet_ticks"`   // utime+stime in those, clock ticks
	QuietSwitch  int64 `json:"quiet_switches"`
	UserHZ       int   `json:"user_hz"`
	AllTicks     int64 `json:"all_ticks"`
	Uevents      int64 `json:"uevents"`
	BlockUevents int64 `json:"block_uevents"`
	// PerSecond is each second's [uevents, ticks, context switches].
	PerSecond [][3]int64 `json:"per_second"`
}

func cmdIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	pid := fs.Int("pid", 0, "process to watch")
	want := fs.Int("quiet", 10, "stop after this many quiet seconds")
	most := fs.Int("max", 30, "or after this many seconds in all")
	settle := fs.Duration("settle", 2*time.Second, "wait this long before the first sample (the process's follow-up of what came before)")
	fs.Parse(args)
	if *pid <= 0 {
		return fmt.Errorf("-pid is required")
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, syscall.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 16<<20)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: 1}); err != nil {
		return err
	}
	var events, block atomic.Int64
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.ENOBUFS):
				events.Add(1) // lost some: not quiet
				continue
			case err != nil:
				return
			}
			events.Add(1)
			if bytes.Contains(buf[:n], []byte("\x00SUBSYSTEM=block\x00")) {
				block.Add(1)
			}
		}
	}()

	read := func() (sample, map[string]int64, error) {
		t, err := procTicks(*pid)
		if err != nil {
			return sample{}, nil, err
		}
		return sample{events: events.Load(), ticks: t}, procSwitches(*pid), nil
	}
	time.Sleep(*settle)
	prev, prevSw, err := read()
	if err != nil {
		return err
	}
	first := prev
	var per []sample // per second: deltas
	res := IdleResult{UserHZ: 100}
	for len(per) < *most {
		time.Sleep(time.Second)
		cur, curSw, err := read()
		if err != nil {
			return err
		}
		var sw int64 // threads come and go: count per thread
		for tid, n := range curSw {
			sw += n - prevSw[tid]
		}
		per = append(per, sample{cur.events - prev.events, cur.ticks - prev.ticks, sw})
		res.PerSecond = append(res.PerSecond, [3]int64{cur.events - prev.events, cur.ticks - prev.ticks, sw})
		prev, prevSw = cur, curSw
		if quietCount(per) >= *want {
			break
		}
	}
	res.Seconds = len(per)
	res.AllTicks = prev.ticks - first.ticks
	res.Uevents = events.Load()
	res.BlockUevents = block.Load()
	for i := range per {
		if quietAt(per, i) {
			res.QuietSeconds++
			res.QuietTicks += per[i].ticks
			res.QuietSwitch += per[i].switches
		}
	}
	return printJSON(res)
}

// sample is what one second saw, or the counters at one time.
type sample struct{ events, ticks, switches int64 }

// quietAt: no uevent in seconds i-5 to i+1 (work on events may spill into
// the next seconds, and the samples of the listener and of the process's
// counters are not aligned).
func quietAt(per []sample, i int) bool {
	ev := func(j int) int64 {
		if j < 0 || j >= len(per) {
			return 0
		}
		return per[j].events
	}
	for j := i - 5; j <= i+1; j++ {
		if ev(j) != 0 {
			return false
		}
	}
	return true
}

func quietCount(per []sample) int {
	n := 0
	for i := range per {
		if quietAt(per, i) {
			n++
		}
	}
	return n
}

// procTicks is utime+stime of pid, in clock ticks (USER_HZ, 100 on Linux).
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	// after "(comm)": state is field 3, utime 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// procSwitches returns the context switches of each of pid's threads (each
// is a wake-up), by thread id.
func procSwitches(pid int) map[string]int64 {
	paths, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	out := make(map[string]int64, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		tid := filepath.Base(filepath.Dir(p))
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				out[tid] += x
			}
		}
	}
	return out
}
