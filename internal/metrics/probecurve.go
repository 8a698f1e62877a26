package metrics

import (
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
