package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The synthetic fleets the tests load into a real Prometheus: what each
// machine's node_exporter would have scraped from its iosched metrics
// file, written as OpenMetrics for promtool.

// bounds are the busy-depth histogram's finite bucket bounds, as the
// daemon writes them.
var bounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// synthDisk is one observed disk of a machine.
type synthDisk struct {
	name, key string
	// busy are the busy seconds per second added to each bucket (by
	// index into bounds; len(bounds) is (256, +Inf)), not cumulative.
	busy map[int]float64
	// curves are IOPS by scheduler and depth; source as the daemon
	// labels it.
	curves map[string]map[int]float64
	source string
}

type synthMachine struct {
	instance string
	disks    []synthDisk
}

// openMetrics writes the fleet's series from end-span to end, a sample
// every step: counters growing from 0 at a constant rate, gauges
// constant.
func openMetrics(fleet []synthMachine, end time.Time, span, step time.Duration) []byte {
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
		for _, d := range m.disks {
			base := fmt.Sprintf(`instance=%q,job="node",disk=%q`, m.instance, d.name)
			series("iosched_disk_info", fmt.Sprintf(`%s,key=%q,class=%q,driver="x",model="",hw_queues="1",rotational="0"`,
				base, d.key, strings.SplitN(d.key, "/", 2)[0]), func(int64) float64 { return 1 })
			if d.busy != nil {
				cum := 0.0
				for i := 0; i <= len(bounds); i++ {
					cum += d.busy[i]
					le := "+Inf"
					if i < len(bounds) {
						le = strconv.FormatFloat(bounds[i], 'g', -1, 64)
					}
					rate := cum
					series("iosched_disk_busy_depth_seconds_bucket", fmt.Sprintf(`%s,le=%q`, base, le),
						func(ts int64) float64 { return rate * float64(ts-t0) })
				}
			}
			for _, sched := range slices.Sorted(maps.Keys(d.curves)) {
				for _, depth := range slices.Sorted(maps.Keys(d.curves[sched])) {
					v := d.curves[sched][depth]
					series("iosched_probe_curve_iops", fmt.Sprintf(`%s,scheduler=%q,depth="%d",source=%q`, base, sched, depth, d.source),
						func(int64) float64 { return v })
				}
			}
		}
	}
	b.WriteString("# EOF\n")
	return []byte(b.String())
}
