package metrics

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"time"
)

// CurvePoint is a candidate's read rate at one probe depth.
type CurvePoint struct {
	Depth int
	IOPS  float64
}

// ProbeCurves is a disk's probe decision as the fleet reads it: each
// candidate's curve, where the decision came from and when it was
// measured.
type ProbeCurves struct {
	// Key is the hardware key the decision's figures are of; the series
	// carry it, so that the fleet groups curves by key without joining
	// them to iosched_disk_info. "" leaves the label out.
	Key string
	// Source is "probed" (run here), "remembered" (this machine's
	// store) or "seeded" (a seed file).
	Source string
	// At is when the figures were measured; zero when not known.
	At time.Time
	// Curves are by candidate scheduler.
	Curves map[string][]CurvePoint
}

// SetProbeCurves replaces a disk's probe curves. ForgetProbe drops them
// with the disk's other probe series.
func (r *Recorder) SetProbeCurves(disk string, c ProbeCurves) {
	cp := ProbeCurves{Key: c.Key, Source: c.Source, At: c.At, Curves: map[string][]CurvePoint{}}
	for s, pts := range c.Curves {
		cp.Curves[s] = slices.Clone(pts)
	}
	r.mu.Lock()
	if r.curves == nil {
		r.curves = map[string]ProbeCurves{}
	}
	r.curves[disk] = cp
	r.settled = nil
	r.mu.Unlock()
	r.mark()
}

// curveFamilies renders the probe curves. Called with r.mu held.
func (r *Recorder) curveFamilies() []*family {
	iops := &family{name: "iosched_probe_curve_iops", kind: "gauge",
		help: "Read operations per second a disk's probe measured at each depth, by scheduler; key is the hardware key, source says whether probed here, remembered or seeded."}
	ts := &family{name: "iosched_probe_timestamp_seconds", kind: "gauge",
		help: "When the figures of a disk's probe decision were measured, in seconds since the Unix epoch; source as for the curves."}
	iops.byDisk, ts.byDisk = true, true
	for _, disk := range slices.Sorted(maps.Keys(r.curves)) {
		c := r.curves[disk]
		for sched, pts := range c.Curves {
			for _, p := range pts {
				iops.add(p.IOPS, withKey([]string{"disk", disk}, c.Key, "scheduler", sched, "depth", strconv.Itoa(p.Depth), "source", c.Source)...)
			}
		}
		if !c.At.IsZero() {
			ts.add(float64(c.At.UnixNano())/1e9, withKey([]string{"disk", disk}, c.Key, "source", c.Source)...)
		}
	}
	return []*family{iops, ts}
}

// withKey is labels, then key (when not ""), then more: the label pairs
// of a per-disk series that carries its disk's hardware key.
func withKey(labels []string, key string, more ...string) []string {
	labels = slices.Grow(labels, 2+len(more))
	if key != "" {
		labels = append(labels, "key", key)
	}
	return append(labels, more...)
}

// settledFamilies are the per-disk families that change only when a
// disk's probe decision or what it is changes (probe figures, curves,
// info), rendered once and kept until then: the file written after every
// sampler pass would otherwise render a thousand disks' unchanged
// figures again each time. Called with r.mu held.
func (r *Recorder) settledFamilies() []*family {
	if r.settled != nil {
		return r.settled
	}
	fams := append(r.probeFamilies(), r.curveFamilies()...)
	fams = append(fams, r.infoFamily())
	settled := make([]*family, 0, len(fams))
	for _, f := range fams {
		var b bytes.Buffer
		f.render(&b, nil)
		text := b.Bytes()
		settled = append(settled, &family{name: f.name, help: f.help, kind: f.kind, n: len(f.samples),
			rows: func(b *bytes.Buffer, num []byte) []byte { b.Write(text); return num }})
	}
	r.settled = settled
	return settled
}

// probeFamilies renders the disks' probe figures. Called with r.mu held.
func (r *Recorder) probeFamilies() []*family {
	gauge := func(name, help string) *family { return &family{name: name, help: help, kind: "gauge", byDisk: true} }
	probeIOPS := gauge("iosched_probe_iops", "Read operations per second a probe measured, by disk, scheduler and queue depth (1, or deep).")
	probeP99 := gauge("iosched_probe_read_latency_p99_seconds", "99th percentile of read latency a probe measured, by disk, scheduler and queue depth, in seconds.")
	probeChosen := gauge("iosched_probe_chosen", "1 for the scheduler a disk's probe chose, 0 for the others it measured.")
	for _, disk := range slices.Sorted(maps.Keys(r.probes)) {
		for _, p := range r.probes[disk] {
			probeIOPS.add(p.IOPS, "disk", disk, "scheduler", p.Scheduler, "depth", "deep")
			probeIOPS.add(p.QD1IOPS, "disk", disk, "scheduler", p.Scheduler, "depth", "1")
			probeP99.add(p.P99.Seconds(), "disk", disk, "scheduler", p.Scheduler, "depth", "deep")
			probeP99.add(p.QD1P99.Seconds(), "disk", disk, "scheduler", p.Scheduler, "depth", "1")
			chosen := 0.0
			if p.Chosen {
				chosen = 1
			}
			probeChosen.add(chosen, "disk", disk, "scheduler", p.Scheduler)
		}
	}
	return []*family{probeIOPS, probeP99, probeChosen}
}
