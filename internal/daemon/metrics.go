package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/metrics"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/tasks"
	"github.com/iosched/iosched/internal/uevent"
)

// This file feeds the metrics recorder (package metrics). Recording on a
// pass costs atomic adds only; the file is written by a task of its own,
// started once [daemon] metrics_file names one, at most once a second.

// useMetrics points the recorder at the policy's metrics_file and starts
// the writer the first time one is set. Called from the event loop only.
func (d *Daemon) useMetrics(pol *policy.Policy) {
	d.metrics.SetPath(pol.Daemon.MetricsFile)
	if pol.Daemon.MetricsFile == "" || d.metricsWriting {
		return
	}
	d.metricsWriting = true
	d.tasks.Start(tasks.Func("metrics writer", func(ctx context.Context) error {
		d.metrics.Run(ctx) // writes once more when ctx ends
		return nil
	}))
}

// ueventSourceLabel is where the daemon's uevents come from, as counted.
func (d *Daemon) ueventSourceLabel() string {
	if d.udev {
		return "udev"
	}
	return "kernel"
}

// rescanReason maps a scan's reason to the metric's bounded label set.
func rescanReason(reason string) string {
	switch {
	case reason == "start", reason == "reconcile", reason == "reload":
		return reason
	case strings.Contains(reason, "lost"):
		return "overflow"
	}
	return "other"
}

// diskKinds counts the managed disks by class and scheduler, for
// iosched_disks_managed; called with d.mu held, when the state file is
// written (debounced), not on every pass.
func diskKinds(disks map[string]*disk) map[metrics.DiskKind]int {
	out := map[metrics.DiskKind]int{}
	for _, dk := range disks {
		if len(dk.state.Rules) == 0 {
			continue
		}
		k := metrics.DiskKind{Class: string(dk.state.Class), Scheduler: "unset"}
		for _, a := range dk.state.Settings {
			if a.Attribute == "scheduler" {
				k.Scheduler = a.Value
			}
		}
		out[k]++
	}
	return out
}

// burstState is the last burst's latency for the state file, nil before
// any disk was applied after a uevent.
func (d *Daemon) burstState() *statefile.Burst {
	b := d.metrics.LastBurst()
	if b.Disks == 0 {
		return nil
	}
	return &statefile.Burst{
		Disks: b.Disks, Truncated: b.Truncated,
		P50: b.P50.Seconds(), P99: b.P99.Seconds(), Max: b.Max.Seconds(),
		Start: b.Start, End: b.End,
	}
}

// metricsState is the metrics file and its last write's failure, nil when
// no file is written.
func (d *Daemon) metricsState() *statefile.Metrics {
	pol := d.policy.Load()
	if pol == nil || pol.Daemon.MetricsFile == "" {
		return nil
	}
	m := &statefile.Metrics{File: pol.Daemon.MetricsFile}
	if err := d.metrics.WriteError(); err != nil {
		m.Error = err.Error()
	}
	return m
}

// countUevent counts an event the monitor passed on: an atomic add.
func (d *Daemon) countUevent(ev uevent.Event) {
	if ev.Lost {
		d.metrics.Overflow()
		return
	}
	d.metrics.Uevent(ev.Action, d.ueventSourceLabel())
}

// countFollowed counts udevd's processed event heard in kernel mode.
func (d *Daemon) countFollowed(ev uevent.Event) {
	if ev.Lost {
		d.metrics.Overflow()
		return
	}
	d.metrics.Uevent(ev.Action, "udev")
}

// recordProbe gives the metrics a disk's probe figures, one series per
// candidate (a scheduler, with its nr_requests when the probe measured
// them: Candidate.Name, so that no two series share labels), the winner
// marked.
func (d *Daemon) recordProbe(name string, rep *probe.Report) {
	results := make([]metrics.ProbeResult, 0, len(rep.Candidates))
	for _, c := range rep.Candidates {
		results = append(results, metrics.ProbeResult{
			Scheduler: c.Name(),
			IOPS:      c.IOPS,
			QD1IOPS:   c.QD1IOPS,
			P99:       time.Duration(c.P99us * float64(time.Microsecond)),
			QD1P99:    time.Duration(c.QD1P99 * float64(time.Microsecond)),
			Chosen:    c.Won(rep.Decision),
		})
	}
	d.metrics.SetProbe(name, results)
	d.metrics.SetProbeCurves(name, probeCurves(rep, time.Now()))
}

// probeCurves is the metrics' form of a decision's curves: the key they
// are of, where the decision came from (a probe run now, this machine's
// store, a seed file) and when its figures were measured.
func probeCurves(rep *probe.Report, now time.Time) metrics.ProbeCurves {
	c := metrics.ProbeCurves{Source: "probed", At: now, Curves: map[string][]metrics.CurvePoint{}}
	if rep.Key != (probe.Key{}) {
		c.Key = rep.Key.String()
	}
	switch {
	case strings.HasPrefix(rep.From, "seeded"):
		c.Source, c.At = "seeded", rep.MeasuredAt
	case rep.From != "":
		c.Source, c.At = "remembered", rep.MeasuredAt
	}
	for _, cand := range rep.Candidates {
		for _, p := range cand.Points(rep.Depth) {
			c.Curves[cand.Name()] = append(c.Curves[cand.Name()], metrics.CurvePoint{Depth: p.Depth, IOPS: p.IOPS})
		}
	}
	return c
}
