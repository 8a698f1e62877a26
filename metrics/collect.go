package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// descs are the metrics a collector reports from the recorder's counters.
// Names follow Prometheus conventions: a unit in the name, _total on
// counters, labels from small known sets (a disk label only on the probe
// gauges, which change when a probe runs, not with every event).
type descs struct {
	disks       *prometheus.Desc
	changes     *prometheus.Desc
	applyErrors *prometheus.Desc
	drift       *prometheus.Desc
	uevents     *prometheus.Desc
	rescans     *prometheus.Desc
	overflows   *prometheus.Desc
	loadErrs    *prometheus.Desc
	reloadOK    *prometheus.Desc
	reloadAt    *prometheus.Desc
	probeIOPS   *prometheus.Desc
	probeP99    *prometheus.Desc
	probeChosen *prometheus.Desc
	build       *prometheus.Desc
}

func newDescs() *descs {
	return &descs{
		disks: prometheus.NewDesc("iosched_disks_managed",
			"Disks the daemon manages, by class and active scheduler.", []string{"class", "scheduler"}, nil),
		changes: prometheus.NewDesc("iosched_changes_total",
			"Attribute values written and kept, by attribute and by the rule that set them.", []string{"attribute", "rule"}, nil),
		applyErrors: prometheus.NewDesc("iosched_apply_errors_total",
			"Writes that failed or that the kernel did not keep, by attribute.", []string{"attribute"}, nil),
		drift: prometheus.NewDesc("iosched_drift_repairs_total",
			"Values found changed from what the policy had set, and set again, by attribute.", []string{"attribute"}, nil),
		uevents: prometheus.NewDesc("iosched_uevents_total",
			"Uevents of whole disks received, by action and source (kernel or udev).", []string{"action", "source"}, nil),
		rescans: prometheus.NewDesc("iosched_rescans_total",
			"Scans of every disk, by reason: start, overflow (uevents lost), reconcile, reload.", []string{"reason"}, nil),
		overflows: prometheus.NewDesc("iosched_uevent_overflows_total",
			"Times the uevent socket overflowed (ENOBUFS): uevents were lost and every disk was scanned again.", nil, nil),
		loadErrs: prometheus.NewDesc("iosched_policy_load_errors_total",
			"Policy reloads refused (the policy in force stayed).", nil, nil),
		reloadOK: prometheus.NewDesc("iosched_last_reload_success",
			"1 when the last policy reload put the new policy in force, 0 when it was refused.", nil, nil),
		reloadAt: prometheus.NewDesc("iosched_last_reload_timestamp_seconds",
			"When the last policy reload happened, in seconds since the Unix epoch.", nil, nil),
		probeIOPS: prometheus.NewDesc("iosched_probe_iops",
			"Read operations per second a probe measured, by disk, scheduler and queue depth (1, or deep).", []string{"disk", "scheduler", "depth"}, nil),
		probeP99: prometheus.NewDesc("iosched_probe_read_latency_p99_seconds",
			"99th percentile of read latency a probe measured, by disk, scheduler and queue depth, in seconds.", []string{"disk", "scheduler", "depth"}, nil),
		probeChosen: prometheus.NewDesc("iosched_probe_chosen",
			"1 for the scheduler a disk's probe chose, 0 for the others it measured.", []string{"disk", "scheduler"}, nil),
		build: prometheus.NewDesc("iosched_build_info",
			"Always 1; the labels say which iosched runs.", []string{"version", "revision", "goversion"}, nil),
	}
}

// collector reports a Recorder's counters as Prometheus metrics when the
// registry is gathered (when the file is written), never when counting.
type collector struct {
	r *Recorder
	d *descs
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.d
	for _, d := range []*prometheus.Desc{d.disks, d.changes, d.applyErrors, d.drift, d.uevents, d.rescans,
		d.overflows, d.loadErrs, d.reloadOK, d.reloadAt, d.probeIOPS, d.probeP99, d.probeChosen, d.build} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	r, d := c.r, c.d
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	// Every known label pair is reported, zeros included: a rate over a
	// series that appears only at its first event misses that event.
	for a, action := range actions() {
		for s, source := range sources() {
			counter(d.uevents, r.uevents[a][s].Load(), action, source)
		}
	}
	for i, reason := range reasons() {
		counter(d.rescans, r.rescans[i].Load(), reason)
	}
	counter(d.overflows, r.overflows.Load())
	counter(d.loadErrs, r.loadErrs.Load())
	eachCount(&r.changes, func(k attrRule, v uint64) { counter(d.changes, v, k.attribute, k.rule) })
	eachCount(&r.applyErrors, func(k string, v uint64) { counter(d.applyErrors, v, k) })
	eachCount(&r.driftRepairs, func(k string, v uint64) { counter(d.drift, v, k) })

	version, revision, goVersion := buildInfo(r.opts.Version)
	gauge(d.build, 1, version, revision, goVersion)

	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.disks {
		gauge(d.disks, float64(n), k.Class, k.Scheduler)
	}
	if r.reloaded {
		ok := 0.0
		if r.reloadOK {
			ok = 1
		}
		gauge(d.reloadOK, ok)
		gauge(d.reloadAt, float64(r.reloadAt.UnixNano())/1e9)
	}
	for disk, results := range r.probes {
		for _, p := range results {
			gauge(d.probeIOPS, p.IOPS, disk, p.Scheduler, "deep")
			gauge(d.probeIOPS, p.QD1IOPS, disk, p.Scheduler, "1")
			gauge(d.probeP99, p.P99.Seconds(), disk, p.Scheduler, "deep")
			gauge(d.probeP99, p.QD1P99.Seconds(), disk, p.Scheduler, "1")
			chosen := 0.0
			if p.Chosen {
				chosen = 1
			}
			gauge(d.probeChosen, chosen, disk, p.Scheduler)
		}
	}
}

// eachCount calls fn for every counter of m, in no particular order (the
// registry sorts what it gathers).
func eachCount[K comparable](m *sync.Map, fn func(K, uint64)) {
	m.Range(func(k, v any) bool {
		fn(k.(K), v.(*atomic.Uint64).Load())
		return true
	})
}
