package promtest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Probe is one disk's probe result as the daemon's metrics file shows
// it: iosched_probe_iops at depth 1 and deep by scheduler, and
// iosched_probe_chosen (1 for Chosen, 0 for the other schedulers).
type Probe struct {
	Instance, Disk string
	// QD1 and Deep are IOPS by scheduler at depth 1 and at the probe's
	// depth; a scheduler missing from Deep has no deep series.
	QD1, Deep map[string]float64
	Chosen    string
}

// ProbeOpenMetrics writes the probes' series as OpenMetrics does
// (constant gauges from end-span to end, a sample every step, job
// "node"), without the closing "# EOF": JoinOpenMetrics adds it.
func ProbeOpenMetrics(probes []Probe, end time.Time, span, step time.Duration) []byte {
	var b strings.Builder
	var times []int64
	for t := end.Add(-span); !t.After(end); t = t.Add(step) {
		times = append(times, t.Unix())
	}
	series := func(name, labels string, v float64) {
		for _, ts := range times {
			fmt.Fprintf(&b, "%s{%s} %s %d\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64), ts)
		}
	}
	for _, p := range probes {
		base := fmt.Sprintf(`instance=%q,job="node",disk=%q`, p.Instance, p.Disk)
		for _, sched := range slices.Sorted(maps.Keys(p.QD1)) {
			series("iosched_probe_iops", fmt.Sprintf(`%s,scheduler=%q,depth="1"`, base, sched), p.QD1[sched])
			if v, ok := p.Deep[sched]; ok {
				series("iosched_probe_iops", fmt.Sprintf(`%s,scheduler=%q,depth="deep"`, base, sched), v)
			}
			chosen := 0.0
			if sched == p.Chosen {
				chosen = 1
			}
			series("iosched_probe_chosen", fmt.Sprintf(`%s,scheduler=%q`, base, sched), chosen)
		}
	}
	return []byte(b.String())
}

// JoinOpenMetrics makes one OpenMetrics file of several (OpenMetrics'
// and ProbeOpenMetrics' output): each part without its "# EOF", one at
// the end.
func JoinOpenMetrics(parts ...[]byte) []byte {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strings.TrimSuffix(string(p), "# EOF\n"))
	}
	b.WriteString("# EOF\n")
	return []byte(b.String())
}
