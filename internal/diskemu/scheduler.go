package diskemu

import (
	"os"
	"strings"
	"time"
)

// FollowScheduler keeps d told (SetScheduler) of the scheduler the loop
// device at /sys/block/NAME (sysDir) runs, reading its queue/scheduler
// every interval until stop closes. The kernel announces no change of it
// (sysfs attributes are not pollable), hence the reads; a read that fails
// (the loop is going away) leaves the last one in force.
func FollowScheduler(d *Disk, sysDir string, every time.Duration, stop <-chan struct{}) {
	path := sysDir + "/queue/scheduler"
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := ""
	for {
		if b, err := os.ReadFile(path); err == nil {
			if s := activeScheduler(string(b)); s != "" && s != last {
				d.SetScheduler(s)
				last = s
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// activeScheduler is the bracketed name of a queue/scheduler file
// ("none [mq-deadline] kyber"), or its only name; "" when it has neither.
func activeScheduler(s string) string {
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j]
	}
	if f := strings.Fields(s); len(f) == 1 {
		return f[0]
	}
	return ""
}
