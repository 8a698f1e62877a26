package metrics

import (
	"bytes"
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file renders the recorder in the Prometheus text exposition format
// (version 0.0.4, https://prometheus.io/docs/instrumenting/exposition_formats/),
// by hand: see doc.go for why not with client_golang. Names follow
// Prometheus conventions: a unit in the name, _total on counters, labels
// from small known sets (a disk label only on the probe gauges, which
// change when a probe runs, and on the adaptive series, which only disks an
// adaptive rule matches have: not with every event).

// latencyBuckets are the histogram's upper bounds, in seconds: a pass on an
// idle machine (about a millisecond) to a burst of a thousand disks behind
// a slow one (seconds).
// An array, returned by value: a pass observing allocates nothing.
func latencyBuckets() [nBuckets]float64 {
	return [nBuckets]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

const nBuckets = 13

// histogram counts observations into buckets with atomics only: a burst's
// passes observe at once.
type histogram struct {
	buckets [nBuckets + 1]atomic.Uint64 // not cumulative; the last is +Inf
	count   atomic.Uint64
	sumNs   atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	bounds := latencyBuckets()
	i, _ := slices.BinarySearch(bounds[:], s) // the first bound >= s
	h.buckets[i].Add(1)
	h.sumNs.Add(int64(d))
	h.count.Add(1)
}

// sample is one line of a family: its labels (name, value pairs) and value.
type sample struct {
	suffix string // _bucket, _sum, _count on a histogram's lines
	labels []string
	value  float64
}

// family is one metric with its help, type and samples.
type family struct {
	name, help, kind string
	samples          []sample
	// rows, when set, writes the family's n lines itself, in order, in
	// place of samples: the per-disk families of a thousand observed
	// disks, whose every line changes with every sampler pass, are
	// written straight from the disks' figures.
	rows func(b *bytes.Buffer, num []byte) []byte
	n    int
	// byDisk: every sample's first label is disk, and they were added
	// disk by disk in name order, so only each disk's own samples need
	// sorting: a full sort of a thousand disks' samples was most of a
	// write.
	byDisk bool
}

func (f *family) add(v float64, labels ...string) {
	f.samples = append(f.samples, sample{labels: labels, value: v})
}

// exposition renders every metric, families sorted by name and samples by
// label values, as a registry would.
func (r *Recorder) exposition() []byte { return r.appendExposition(nil) }

// appendExposition is exposition, written over dst's bytes (dst[:0]).
func (r *Recorder) appendExposition(dst []byte) []byte {
	counter := func(name, help string) *family { return &family{name: name, help: help, kind: "counter"} }
	gauge := func(name, help string) *family { return &family{name: name, help: help, kind: "gauge"} }
	var (
		disks         = gauge("iosched_disks_managed", "Disks the daemon manages, by class and active scheduler.")
		changes       = counter("iosched_changes_total", "Attribute values written and kept, by attribute and by the rule that set them.")
		applyErrors   = counter("iosched_apply_errors_total", "Writes that failed or that the kernel did not keep, by attribute.")
		drift         = counter("iosched_drift_repairs_total", "Values found changed from what the policy had set, and set again, by attribute.")
		uevents       = counter("iosched_uevents_total", "Uevents of whole disks received, by action and source (kernel or udev).")
		rescans       = counter("iosched_rescans_total", "Scans of every disk, by reason: start, overflow (uevents lost), reconcile, reload.")
		overflows     = counter("iosched_uevent_overflows_total", "Times the uevent socket overflowed (ENOBUFS): uevents were lost and every disk was scanned again.")
		loadErrs      = counter("iosched_policy_load_errors_total", "Policy reloads refused (the policy in force stayed).")
		reloadOK      = gauge("iosched_last_reload_success", "1 when the last policy reload put the new policy in force, 0 when it was refused.")
		reloadAt      = gauge("iosched_last_reload_timestamp_seconds", "When the last policy reload happened, in seconds since the Unix epoch.")
		adaptSwitches = counter("iosched_adapt_switches_total", "Adaptive switches of disks' schedulers ([rule.adapt]), by the scheduler switched to; guard=\"true\" for the guard rail's switches back.")
		adaptBusy     = gauge("iosched_adapt_busy_depth", "Mean requests in flight while the disk was busy over its last sample, by adaptive disk.")
		adaptWindow   = gauge("iosched_adapt_window_depth", "The operating point of an adaptive disk's window: the busy-time-weighted median busy depth of its busy samples (0 when idle).")
		build         = gauge("iosched_build_info", "Always 1; the labels say which iosched runs.")
		latency       = &family{name: "iosched_uevent_to_applied_seconds", help: "Time from a disk's uevent to its settings applied, in seconds.", kind: "histogram"}
	)
	// Every known label pair is reported, zeros included: a rate over a
	// series that appears only at its first event misses that event.
	for a, action := range actions() {
		for s, source := range sources() {
			uevents.add(float64(r.uevents[a][s].Load()), "action", action, "source", source)
		}
	}
	for i, reason := range reasons() {
		rescans.add(float64(r.rescans[i].Load()), "reason", reason)
	}
	overflows.add(float64(r.overflows.Load()))
	loadErrs.add(float64(r.loadErrs.Load()))
	eachCount(&r.changes, func(k attrRule, v uint64) { changes.add(float64(v), "attribute", k.attribute, "rule", k.rule) })
	eachCount(&r.applyErrors, func(k string, v uint64) { applyErrors.add(float64(v), "attribute", k) })
	eachCount(&r.driftRepairs, func(k string, v uint64) { drift.add(float64(v), "attribute", k) })
	eachCount(&r.adaptSwitches, func(k adaptSwitchKey, v uint64) {
		adaptSwitches.add(float64(v), "scheduler", k.scheduler, "guard", strconv.FormatBool(k.guard))
	})

	version, revision, goVersion := buildInfo(r.opts.Version)
	build.add(1, "version", version, "revision", revision, "goversion", goVersion)

	// The count is read first: a pass observing meanwhile may show in the
	// buckets and not the count, never the other way round.
	count := r.latency.count.Load()
	var cum uint64
	for i, le := range latencyBuckets() {
		cum += r.latency.buckets[i].Load()
		latency.samples = append(latency.samples, sample{suffix: "_bucket", labels: []string{"le", formatFloat(le)}, value: float64(cum)})
	}
	cum += r.latency.buckets[nBuckets].Load()
	latency.samples = append(latency.samples,
		sample{suffix: "_bucket", labels: []string{"le", "+Inf"}, value: float64(max(cum, count))},
		sample{suffix: "_sum", value: time.Duration(r.latency.sumNs.Load()).Seconds()},
		sample{suffix: "_count", value: float64(max(cum, count))})

	r.mu.Lock()
	for k, n := range r.disks {
		disks.add(float64(n), "class", k.Class, "scheduler", k.Scheduler)
	}
	if r.reloaded {
		ok := 0.0
		if r.reloadOK {
			ok = 1
		}
		reloadOK.add(ok)
		reloadAt.add(float64(r.reloadAt.UnixNano()) / 1e9)
	}
	adaptBusy.byDisk, adaptWindow.byDisk = true, true
	for _, disk := range slices.Sorted(maps.Keys(r.adapt)) {
		a := r.adapt[disk]
		adaptBusy.add(a.busy, "disk", disk)
		adaptWindow.add(a.window, "disk", disk)
	}
	busy := append(r.busyFamilies(), r.settledFamilies()...)
	r.mu.Unlock()

	fams := []*family{disks, changes, applyErrors, drift, uevents, rescans, overflows, loadErrs,
		reloadOK, reloadAt, adaptSwitches, adaptBusy, adaptWindow, build, latency}
	fams = append(fams, busy...)
	slices.SortFunc(fams, func(a, b *family) int { return cmp.Compare(a.name, b.name) })
	// A file of a thousand observed disks is megabytes: the writer hands
	// in the last file's buffer, so that it is neither grown nor cleared
	// again, and pieces are written one by one, not concatenated first.
	b := bytes.NewBuffer(dst[:0])
	var num []byte
	for _, f := range fams {
		if len(f.samples) == 0 && f.n == 0 {
			continue // as a registry leaves out a family with no sample
		}
		b.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n")
		b.WriteString("# TYPE " + f.name + " " + f.kind + "\n")
		if f.rows != nil {
			num = f.rows(b, num)
			continue
		}
		num = f.render(b, num)
	}
	return b.Bytes()
}

// render sorts f's samples by label values (but a histogram's, which are
// in bucket order) and writes their lines.
func (f *family) render(b *bytes.Buffer, num []byte) []byte {
	byLabels := func(a, b sample) int { return slices.Compare(a.labels, b.labels) }
	switch {
	case f.kind == "histogram":
	case f.byDisk:
		for i := 0; i < len(f.samples); {
			j := i + 1
			for j < len(f.samples) && f.samples[j].labels[1] == f.samples[i].labels[1] {
				j++
			}
			slices.SortFunc(f.samples[i:j], byLabels)
			i = j
		}
	default:
		slices.SortFunc(f.samples, byLabels)
	}
	for _, s := range f.samples {
		b.WriteString(f.name)
		b.WriteString(s.suffix)
		if len(s.labels) > 0 {
			b.WriteByte('{')
			for i := 0; i < len(s.labels); i += 2 {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(s.labels[i])
				b.WriteString(`="`)
				writeLabelValue(b, s.labels[i+1])
				b.WriteByte('"')
			}
			b.WriteByte('}')
		}
		b.WriteByte(' ')
		num = appendFloat(num[:0], s.value)
		b.Write(num)
		b.WriteByte('\n')
	}
	return num
}

// formatFloat writes a value as the format wants it: the shortest
// representation, and +Inf, -Inf, NaN spelled so.
func formatFloat(v float64) string { return string(appendFloat(nil, v)) }

// appendFloat appends v to dst as formatFloat writes it.
func appendFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// The format escapes backslash and newline in help text, and the double
// quote too in label values. The replacers are built once: a file of a thousand observed disks has
// tens of thousands of label values, and building one is most of the
// cost of escaping.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// writeDiskLine writes one line of a per-disk series, its labels in the
// order samples of them are sorted by: name{disk="D",key="K",l="v"} x,
// without key when it is "" and without l when it is "".
func writeDiskLine(b *bytes.Buffer, num []byte, name, disk, key, l, v string, x float64) []byte {
	b.WriteString(name)
	b.WriteString(`{disk="`)
	writeLabelValue(b, disk)
	if key != "" {
		b.WriteString(`",key="`)
		writeLabelValue(b, key)
	}
	if l != "" {
		b.WriteString(`",`)
		b.WriteString(l)
		b.WriteString(`="`)
		writeLabelValue(b, v)
	}
	b.WriteString(`"} `)
	num = appendFloat(num[:0], x)
	b.Write(num)
	b.WriteByte('\n')
	return num
}

// writeLabelValue writes s escaped as a label value.
func writeLabelValue(b *bytes.Buffer, s string) {
	if !needsEscape(s) {
		b.WriteString(s)
		return
	}
	labelEscaper.WriteString(b, s)
}

// needsEscape: s has a byte a label value escapes. A loop over the bytes,
// not strings.ContainsAny, which builds its set on every call.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '\n' || c == '"' {
			return true
		}
	}
	return false
}

// eachCount calls fn for every counter of m, in no particular order (the
// samples are sorted when written).
func eachCount[K comparable](m *sync.Map, fn func(K, uint64)) {
	m.Range(func(k, v any) bool {
		fn(k.(K), v.(*atomic.Uint64).Load())
		return true
	})
}
