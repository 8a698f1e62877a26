// Package fleet reads the fleet's view of iosched's metrics back from
// Prometheus: for each hardware key, the busy time of the fleet's
// observed disks by in-flight depth, each candidate scheduler's probe
// curve across the machines that measured it, and the verdict, each
// candidate's IOPS change against the scheduler the kernel would choose,
// weighted by where the fleet's busy time sits.
//
// It reads what the daemons wrote (package metrics) and node_exporter's
// textfile collector exported: iosched_disk_info, the histogram's series
// iosched_disk_busy_depth_seconds and iosched_probe_curve_iops, each
// carrying its disk's hardware key. Prometheus does the aggregation by
// key (and, with a match, the joins to the disks it selects), so the
// answer for ten thousand disks is a few thousand series.
//
// # How the verdict is made
//
// A key's busy time is the increase of its disks' histogram over the
// window, summed; each bucket (lo, le] stands for one depth: 1 for the
// first (a busy disk has at least one request in flight), the geometric
// middle sqrt(lo*le) for the others, lo for +Inf. A curve is read at that
// depth as the adaptive controller reads it (adapt.IOPSAt: linear in
// log(depth) between probe depths, flat past the ends); the metric gives
// the depth the probe kept in flight, read as the disk's depth. A
// candidate's change at a depth is its IOPS over the kernel's scheduler's
// minus one; the verdict is the mean of those changes weighted by the
// key's busy time in each bucket. Change is read on the median curves
// (each machine's curve the median of its disks of the key, then the
// median over machines at each depth); Low and High are the least and
// greatest change among the machines that measured both the candidate
// and the kernel's scheduler, each on its own curves, weighted by the
// same fleet-wide busy time.
//
// The curves are those exported at the window's end (each disk's
// decision as it stands); curves of source "seeded" are left out: a
// seeded curve is a copy of another's (perhaps the fleet's own,
// exported), not a measurement.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// Options say what to query.
type Options struct {
	// Match are extra PromQL label matchers on iosched_disk_info (which
	// carries key, class, driver, model, hw_queues, rotational and the
	// scrape's instance and job), e.g. `{key=~"virtio.*"}`; "" for
	// every disk.
	Match string
	// Range is the window busy time is counted over, ending at At.
	Range time.Duration
	// At is the end of the window; zero means now.
	At time.Time
	// MinMachines is the fewest machines a key needs for a verdict.
	MinMachines int
}

// Report is the fleet's view, one entry per hardware key, in key order.
type Report struct {
	Keys []Key `json:"keys"`
}

// Key is one hardware key's view.
type Key struct {
	Key string `json:"key"`
	// Machines and Disks are the Prometheus instances and their observed
	// disks of the key over the window.
	Machines int `json:"machines"`
	Disks    int `json:"disks"`
	// BusyHours is the disks' busy time over the window, added up.
	BusyHours float64 `json:"busy_hours"`
	// Depths are the shares of busy time by depth bucket, in bucket
	// order; empty when no busy time was observed.
	Depths []DepthShare `json:"depths"`
	// Curves are the candidates' curves, by scheduler name.
	Curves []Curve `json:"curves"`
	// Kernel is the scheduler the kernel gives such a disk
	// (sysfs.KernelScheduler); "" for a bio-based one.
	Kernel string `json:"kernel"`
	// Verdicts are each other candidate's change against Kernel.
	Verdicts []Verdict `json:"verdicts"`
	// Note says plainly why a verdict is missing (no probe data, too few
	// machines, no busy time, the kernel's scheduler not measured).
	Note string `json:"note,omitempty"`
}

// DepthShare is the share of a key's busy time in one depth bucket.
type DepthShare struct {
	Le    float64 // bucket upper bound, math.Inf(1) for +Inf
	Share float64 // of busy time in this bucket (not cumulative)
}

// MarshalJSON writes le as Prometheus does, a string ("+Inf" for the
// last bucket): JSON has no infinity.
func (d DepthShare) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Le    string  `json:"le"`
		Share float64 `json:"share"`
	}{strconv.FormatFloat(d.Le, 'g', -1, 64), d.Share})
}

// UnmarshalJSON reads what MarshalJSON writes, so that a report read
// back from `iosched fleet --json` is the one written.
func (d *DepthShare) UnmarshalJSON(b []byte) error {
	var v struct {
		Le    string  `json:"le"`
		Share float64 `json:"share"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	le, err := strconv.ParseFloat(v.Le, 64)
	if err != nil {
		return fmt.Errorf("depth bucket le %q: want a number or +Inf", v.Le)
	}
	d.Le, d.Share = le, v.Share
	return nil
}

// Curve is a candidate's curve across the machines that probed it.
type Curve struct {
	Scheduler string       `json:"scheduler"`
	Points    []CurvePoint `json:"points"`
}

// CurvePoint is a candidate's IOPS at one depth over the machines: the
// median, least and greatest of the machines' own figures.
type CurvePoint struct {
	Depth    int     `json:"depth"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	Machines int     `json:"machines"`
}

// Verdict is a candidate's weighted IOPS change against the kernel's
// choice.
type Verdict struct {
	Scheduler string `json:"scheduler"`
	// Change is on the median curves, Low and High the range over the
	// machines, as fractions (0.07 for +7%).
	Change float64 `json:"change"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	// Machines measured both the candidate and the kernel's scheduler.
	Machines int `json:"machines"`
	// ByDepth is the change in each bucket of Depths, in its order.
	ByDepth []float64 `json:"by_depth"`
}

// Query reads the fleet's view from Prometheus: four instant queries at
// o.At, run at once. An error when a query fails; a Report with no keys
// when no disk matched.
func Query(ctx context.Context, api v1.API, o Options) (*Report, error) {
	if err := checkOptions(o); err != nil {
		return nil, err
	}
	return query(ctx, api, o, queriesFor(o))
}

// query runs q for Query.
func query(ctx context.Context, api v1.API, o Options, q queries) (*Report, error) {
	at := o.At
	if at.IsZero() {
		at = time.Now()
	}
	// The queries run at once: each is one evaluation on the server, on
	// one of its threads, and its answer is decoded here on one of ours.
	todo := []struct{ what, query string }{
		{"disks by key and machine", q.disks},
		{"busy time by key and depth", q.busy},
	}
	for _, c := range q.curves {
		todo = append(todo, struct{ what, query string }{"probe curves by key and machine", c})
	}
	var (
		wg   sync.WaitGroup
		vecs = make([]model.Vector, len(todo))
		errs = make([]error, len(todo))
	)
	for i, qq := range todo {
		wg.Go(func() {
			v, _, _, err := api.Query(ctx, qq.query, at)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w (query: %s)", qq.what, err, qq.query)
				return
			}
			vec, ok := v.(model.Vector)
			if !ok {
				errs[i] = fmt.Errorf("%s: Prometheus answered a %s, not a vector (query: %s)", qq.what, v.Type(), qq.query)
				return
			}
			vecs[i] = vec
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return build(vecs[0], vecs[1], slices.Concat(vecs[2:]...), o.MinMachines), nil
}

// checkOptions refuses options no query can be made of.
func checkOptions(o Options) error {
	if m := strings.TrimSpace(o.Match); m != "" && (!strings.HasPrefix(m, "{") || !strings.HasSuffix(m, "}")) {
		return fmt.Errorf("match %q: want label matchers in braces, such as {key=~\"virtio.*\"}", o.Match)
	}
	if o.Range < time.Minute {
		return fmt.Errorf("range %s: want at least 1m", o.Range)
	}
	if o.MinMachines < 1 {
		return fmt.Errorf("min machines %d: want at least 1", o.MinMachines)
	}
	return nil
}

// queries are the PromQL expressions Query runs.
type queries struct {
	disks, busy string
	curves      []string
}

// queriesFor builds the queries. The disks of the window are those with
// an iosched_disk_info series in it (last_over_time); a disk whose key
// changed within the window (a kernel upgrade: the key names the kernel)
// counts under each key it had.
//
// The busy-time buckets and the curves carry their disk's key, so that
// without a match they are summed by key as they are, busy time under
// the key the disk had while busy: no join. Joining ten thousand disks'
// 10 buckets and 18 curve points to their info series is what makes a
// fleet's answer slow. A match selects by the info series' labels, so
// with one the series are kept only where a selected info series has
// their disk and key (and on, which asks nothing of how many info series
// a disk has). The curves are those exported at the window's end (each
// disk's decision as it stands); without a match, those of every disk
// that exports curves of a key in the window, observed or not.
func queriesFor(o Options) queries {
	m := strings.TrimSpace(o.Match)
	r := model.Duration(o.Range).String()
	info := fmt.Sprintf(`last_over_time(iosched_disk_info%s[%s])`, m, r)
	q := queries{disks: fmt.Sprintf(`count by (key, instance) (count by (key, instance, disk) (%s))`, info)}
	only := ""
	if m != "" {
		only = " and on (instance, disk, key) " + info
	}
	q.busy = fmt.Sprintf(`sum by (key, le) (increase(iosched_disk_busy_depth_seconds_bucket[%s])%s)`, r, only)
	// Seeded curves are told apart by source in build, not by a matcher,
	// which costs the server more. The curves' answer is the largest (a
	// series per key, machine, scheduler, depth and source), so two
	// queries share it and run at once over disjoint series: scheduler
	// "none", which nearly every probe measures, and the others. The
	// quantile is by scheduler, so no result series needs both.
	const curves = `quantile by (key, instance, scheduler, depth, source) (0.5, iosched_probe_curve_iops{scheduler%s"none"}%s)`
	q.curves = []string{fmt.Sprintf(curves, "=", only), fmt.Sprintf(curves, "!=", only)}
	return q
}

// build makes the report of the queries' answers (the curves' answers
// together).
func build(disks, busy, curves model.Vector, minMachines int) *Report {
	// The keys are those of the window's disks; busy time and curves of
	// another key (a disk that exports curves but is not observed, a
	// series without a key) are left out.
	keys := map[string]*keyData{}
	of := func(s *model.Sample) *keyData { return keys[string(s.Metric["key"])] }
	for _, s := range disks {
		k := string(s.Metric["key"])
		d := keys[k]
		if d == nil {
			d = &keyData{buckets: map[float64]float64{}, curves: map[string]map[int]map[string]float64{}}
			keys[k] = d
		}
		d.machines++
		d.disks += int(s.Value)
	}
	for _, s := range busy {
		le, err := strconv.ParseFloat(string(s.Metric["le"]), 64)
		if d := of(s); d != nil && err == nil && !math.IsNaN(float64(s.Value)) {
			d.buckets[le] += float64(s.Value)
		}
	}
	for _, s := range curves {
		depth, err := strconv.Atoi(string(s.Metric["depth"]))
		v := float64(s.Value)
		d := of(s)
		if d == nil || err != nil || depth < 1 || math.IsNaN(v) || v <= 0 || s.Metric["source"] == "seeded" {
			continue
		}
		sched := string(s.Metric["scheduler"])
		if d.curves[sched] == nil {
			d.curves[sched] = map[int]map[string]float64{}
		}
		if d.curves[sched][depth] == nil {
			d.curves[sched][depth] = map[string]float64{}
		}
		// A machine whose disks of the key have curves of two sources
		// (probed, remembered) has the mean of their medians.
		inst := string(s.Metric["instance"])
		if old, ok := d.curves[sched][depth][inst]; ok {
			v = (old + v) / 2
		}
		d.curves[sched][depth][inst] = v
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	rep := &Report{Keys: make([]Key, 0, len(names))}
	for _, k := range names {
		rep.Keys = append(rep.Keys, keys[k].key(k, minMachines))
	}
	return rep
}

// keyData is one key's answers, gathered.
type keyData struct {
	machines, disks int
	// buckets are the cumulative busy seconds by le.
	buckets map[float64]float64
	// curves are IOPS by scheduler, depth and machine.
	curves map[string]map[int]map[string]float64
}

// key makes a key's view.
func (d *keyData) key(name string, minMachines int) Key {
	k := Key{Key: name, Machines: d.machines, Disks: d.disks}
	var notes []string
	if pk, err := probe.ParseKey(name); err == nil {
		k.Kernel = sysfs.KernelScheduler(sysfs.Class(pk.Class), pk.HWQueues)
	} else {
		notes = append(notes, "the key is not one iosched writes, so the kernel's choice is not known")
	}
	k.Depths, k.BusyHours = shares(d.buckets)
	k.Curves = d.fleetCurves()
	switch {
	case pkBioBased(name):
		notes = append(notes, "bio-based disks have no scheduler to choose")
	case len(k.Curves) == 0:
		notes = append(notes, "no probe data: no disk of this key has probe curves (a rule's probe measures them)")
	case k.BusyHours == 0:
		notes = append(notes, "no busy time observed over the range (a rule's observe key records it)")
	case k.Machines < minMachines:
		notes = append(notes, fmt.Sprintf("only %d machine%s, fewer than the %d a verdict needs", k.Machines, plural(k.Machines), minMachines))
	case k.Kernel != "" && d.curves[k.Kernel] == nil:
		notes = append(notes, fmt.Sprintf("the kernel's choice, %s, was not measured: no verdict against it", k.Kernel))
	case k.Kernel != "":
		k.Verdicts = d.verdicts(k)
	}
	k.Note = strings.Join(notes, "; ")
	return k
}

// pkBioBased: the key's class is bio-based.
func pkBioBased(name string) bool {
	pk, err := probe.ParseKey(name)
	return err == nil && sysfs.Class(pk.Class).Spec().BioBased
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// shares turns cumulative busy seconds by le into each bucket's share
// and the busy hours in all; nil and 0 when there is no busy time. A
// bucket the extrapolation of increase() left below the one before
// counts as empty.
func shares(cum map[float64]float64) ([]DepthShare, float64) {
	les := make([]float64, 0, len(cum))
	for le := range cum {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 {
		return nil, 0
	}
	total := cum[les[len(les)-1]]
	if total <= 0 || !math.IsInf(les[len(les)-1], 1) {
		return nil, 0
	}
	out := make([]DepthShare, len(les))
	prev := 0.0
	for i, le := range les {
		c := max(cum[le], prev)
		out[i] = DepthShare{Le: le, Share: (c - prev) / total}
		prev = c
	}
	return out, total / 3600
}

// fleetCurves are the median curves, by scheduler name.
func (d *keyData) fleetCurves() []Curve {
	scheds := make([]string, 0, len(d.curves))
	for s := range d.curves {
		scheds = append(scheds, s)
	}
	slices.Sort(scheds)
	out := make([]Curve, 0, len(scheds))
	for _, s := range scheds {
		c := Curve{Scheduler: s}
		depths := make([]int, 0, len(d.curves[s]))
		for dep := range d.curves[s] {
			depths = append(depths, dep)
		}
		slices.Sort(depths)
		for _, dep := range depths {
			vals := make([]float64, 0, len(d.curves[s][dep]))
			for _, v := range d.curves[s][dep] {
				vals = append(vals, v)
			}
			slices.Sort(vals)
			c.Points = append(c.Points, CurvePoint{Depth: dep, Median: median(vals), Min: vals[0], Max: vals[len(vals)-1], Machines: len(vals)})
		}
		out = append(out, c)
	}
	return out
}

// median of sorted vals: the middle one, or the mean of the two middle
// ones (as PromQL's quantile(0.5) gives).
func median(vals []float64) float64 {
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}
