package metrics

import (
	"bytes"
	"maps"
	"slices"
	"strings"
)

// BusyDepths is an observed disk's busy time by in-flight depth, as a
// histogram whose observations are busy seconds: Cumulative[i] the busy
// seconds at a depth up to Bounds[i], the last entry (one more than
// Bounds) every busy second. Every value only grows while the daemon
// runs.
type BusyDepths struct {
	Bounds     []float64
	Cumulative []float64
	// Sum is the depth times the busy seconds, summed.
	Sum float64
	// Reads and Writes are the I/Os completed while observed.
	Reads, Writes uint64
}

// DiskInfo is what an observed disk is, for iosched_disk_info: Key the
// hardware key probe results are shared under, the rest its parts as
// sysfs says them ("" or "unknown" when it does not).
type DiskInfo struct {
	Key, Class, Driver, Model, HWQueues, Rotational string
}

// SetDiskInfo records what an observed disk is.
func (r *Recorder) SetDiskInfo(disk string, info DiskInfo) {
	r.mu.Lock()
	if r.info == nil {
		r.info = map[string]DiskInfo{}
	}
	old, had := r.info[disk]
	r.info[disk] = info
	if !had || old != info {
		r.settled = nil
	}
	r.mu.Unlock()
	if !had || old != info {
		r.mark()
	}
}

// SetBusyDepths replaces an observed disk's busy-depth histogram and I/O
// counts (a rule's observe key). Values that did not change mark nothing
// to write.
func (r *Recorder) SetBusyDepths(disk string, b BusyDepths) {
	b.Bounds = slices.Clone(b.Bounds)
	b.Cumulative = slices.Clone(b.Cumulative)
	r.mu.Lock()
	if r.busy == nil {
		r.busy = map[string]BusyDepths{}
	}
	old, had := r.busy[disk]
	same := had && old.Sum == b.Sum && old.Reads == b.Reads && old.Writes == b.Writes &&
		slices.Equal(old.Bounds, b.Bounds) && slices.Equal(old.Cumulative, b.Cumulative)
	r.busy[disk] = b
	r.mu.Unlock()
	if !same {
		r.mark()
	}
}

// ForgetObserved drops a disk's observed series (its info, busy depths
// and I/O counts): the disk went away or no rule observes it any more. A
// series of a gone disk left in the file would be exported for ever.
func (r *Recorder) ForgetObserved(disk string) {
	r.mu.Lock()
	_, had := r.busy[disk]
	_, hadInfo := r.info[disk]
	delete(r.busy, disk)
	delete(r.info, disk)
	if hadInfo {
		r.settled = nil
	}
	r.mu.Unlock()
	if had || hadInfo {
		r.mark()
	}
}

// busyFamilies renders the observed disks' series, disks in name order,
// each disk's buckets in bucket order. Called with r.mu held.
//
// Each series carries the disk's hardware key (its info's), as the probe
// curves do: the fleet sums busy time by key without joining ten
// thousand disks' buckets to their info series, the costliest part of
// its answer.
//
// The busy time by depth has a histogram's series (_bucket by le, _sum,
// _count), each written as a family of its own, untyped, not as a
// histogram: node_exporter's textfile collector (1.5, Debian 12's) reads
// a histogram's counts as whole numbers and exports them truncated, which
// drops up to a second of every bucket, all of a depth a disk spent less
// than a second at, and makes buckets disagree with the count. An untyped
// value passes through as written (a counter would too, but promtool's
// lint refuses a counter named _bucket with an le label); PromQL reads the
// series by name and le alike either way. Each only grows.
func (r *Recorder) busyFamilies() []*family {
	buckets := &family{name: "iosched_disk_busy_depth_seconds_bucket", kind: "untyped",
		help: "Busy seconds of an observed disk by the mean requests in flight while busy over each sample, cumulative: le is at most that depth, +Inf every busy second (a histogram's buckets)."}
	sum := &family{name: "iosched_disk_busy_depth_seconds_sum", kind: "untyped",
		help: "Busy seconds of an observed disk times the depth they were at, summed: the seconds requests spent in flight while observed."}
	count := &family{name: "iosched_disk_busy_depth_seconds_count", kind: "untyped",
		help: "Busy seconds of an observed disk, at any depth (the +Inf bucket)."}
	ios := &family{name: "iosched_disk_observed_ios_total", kind: "counter",
		help: "Reads and writes an observed disk completed while the daemon sampled it, by op."}
	// The disks' figures as they stand: SetBusyDepths replaces a disk's
	// whole, never changes one in place, so they are written after the
	// lock is let go, disks in name order, each disk's lines in label
	// order (buckets in bucket order, read before write).
	type row struct {
		disk, key string
		b         BusyDepths
	}
	rows := make([]row, 0, len(r.busy))
	for d, b := range r.busy {
		if len(b.Cumulative) == len(b.Bounds)+1 { // else not a histogram: SetBusyDepths' caller's mistake
			rows = append(rows, row{d, r.info[d].Key, b})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.disk, b.disk) })
	les := map[float64]string{}
	for _, o := range rows {
		for _, le := range o.b.Bounds {
			if _, ok := les[le]; !ok {
				les[le] = formatFloat(le)
			}
		}
	}
	buckets.rows = func(b *bytes.Buffer, num []byte) []byte {
		for _, o := range rows {
			for i, le := range o.b.Bounds {
				num = writeDiskLine(b, num, buckets.name, o.disk, o.key, "le", les[le], o.b.Cumulative[i])
			}
			num = writeDiskLine(b, num, buckets.name, o.disk, o.key, "le", "+Inf", o.b.Cumulative[len(o.b.Bounds)])
		}
		return num
	}
	sum.rows = func(b *bytes.Buffer, num []byte) []byte {
		for _, o := range rows {
			num = writeDiskLine(b, num, sum.name, o.disk, o.key, "", "", o.b.Sum)
		}
		return num
	}
	count.rows = func(b *bytes.Buffer, num []byte) []byte {
		for _, o := range rows {
			num = writeDiskLine(b, num, count.name, o.disk, o.key, "", "", o.b.Cumulative[len(o.b.Bounds)])
		}
		return num
	}
	ios.rows = func(b *bytes.Buffer, num []byte) []byte {
		for _, o := range rows {
			num = writeDiskLine(b, num, ios.name, o.disk, o.key, "op", "read", float64(o.b.Reads))
			num = writeDiskLine(b, num, ios.name, o.disk, o.key, "op", "write", float64(o.b.Writes))
		}
		return num
	}
	for _, o := range rows {
		buckets.n += len(o.b.Bounds) + 1
	}
	sum.n, count.n, ios.n = len(rows), len(rows), 2*len(rows)
	return []*family{buckets, sum, count, ios}
}

// infoFamily renders iosched_disk_info. Called with r.mu held.
func (r *Recorder) infoFamily() *family {
	info := &family{name: "iosched_disk_info", kind: "gauge",
		help: "Always 1 for an observed disk; the labels say what it is, key the hardware key its probe results are shared under."}
	info.byDisk = true
	for _, d := range slices.Sorted(maps.Keys(r.info)) {
		in := r.info[d]
		info.add(1, "disk", d, "key", in.Key, "class", in.Class, "driver", in.Driver, "model", in.Model,
			"hw_queues", in.HWQueues, "rotational", in.Rotational)
	}
	return info
}
