package promtest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Synthetic fleets for tests to load into a real Prometheus (StartServer):
// what each machine's node_exporter would have scraped from its iosched
// metrics file, written as OpenMetrics for promtool.

// BusyBounds are the busy-depth histogram's finite bucket BusyBounds, as the
// daemon writes them.
var BusyBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// Disk is one observed disk of a machine.
type Disk struct {
	Name, Key string
	// Busy are the busy seconds per second added to each bucket (by
	// index into BusyBounds; len(BusyBounds) is (256, +Inf)), not
	// cumulative; nil for no histogram.
	Busy map[int]float64
	// Curves are IOPS by scheduler and depth; Source as the daemon
	// labels it.
	Curves map[string]map[int]float64
	Source string
}

// Machine is one scrape target's disks.
type Machine struct {
	Instance string
	Disks    []Disk
}

// OpenMetrics writes the fleet's series from end-span to end, a sample
// every step (job "node"): counters growing from 0 at a constant rate,
// gauges constant.
func OpenMetrics(fleet []Machine, end time.Time, span, step time.Duration) []byte {
	var b strings.Builder
	var times []int64
	for t := end.Add(-span); !t.After(end); t = t.Add(step) {
		times = append(times, t.Unix())
	}
	t0 := times[0]
	series := func(name, labels string, value func(ts int64) float64) {
		for _, ts := range times {
			fmt.Fprintf(&b, "%s{%s} %s %d\n", name, labels, strconv.FormatFloat(value(ts), 'g', -1, 64), ts)
		}
	}
	for _, m := range fleet {
		for _, d := range m.Disks {
			base := fmt.Sprintf(`instance=%q,job="node",disk=%q`, m.Instance, d.Name)
			series("iosched_disk_info", fmt.Sprintf(`%s,key=%q,class=%q,driver="x",model="",hw_queues="1",rotational="0"`,
				base, d.Key, strings.SplitN(d.Key, "/", 2)[0]), func(int64) float64 { return 1 })
			if d.Busy != nil {
				cum := 0.0
				for i := 0; i <= len(BusyBounds); i++ {
					cum += d.Busy[i]
					le := "+Inf"
					if i < len(BusyBounds) {
						le = strconv.FormatFloat(BusyBounds[i], 'g', -1, 64)
					}
					rate := cum
					series("iosched_disk_busy_depth_seconds_bucket", fmt.Sprintf(`%s,key=%q,le=%q`, base, d.Key, le),
						func(ts int64) float64 { return rate * float64(ts-t0) })
				}
			}
			for _, sched := range slices.Sorted(maps.Keys(d.Curves)) {
				for _, depth := range slices.Sorted(maps.Keys(d.Curves[sched])) {
					v := d.Curves[sched][depth]
					series("iosched_probe_curve_iops", fmt.Sprintf(`%s,key=%q,scheduler=%q,depth="%d",source=%q`, base, d.Key, sched, depth, d.Source),
						func(int64) float64 { return v })
				}
			}
		}
	}
	b.WriteString("# EOF\n")
	return []byte(b.String())
}
