package sysfs

import "strings"

// Tunables are the queue/ attributes iosched reads and may set, in the order
// they are shown. Nothing outside this list (and queue/iosched/) is ever
// written.
var Tunables = []string{
	"read_ahead_kb", "nr_requests", "nomerges", "rq_affinity", "add_random",
	"iostats", "wbt_lat_usec", "max_sectors_kb", "io_timeout",
}

// WriteRank orders attributes in the order they must be written to one disk,
// so that no write undoes an earlier one (see Resets): the scheduler first,
// then nr_requests, then the scheduler's iosched/* parameters, then the other
// tunables in Tunables order.
func WriteRank(attr string) int {
	switch {
	case attr == "scheduler":
		return 0
	case attr == "nr_requests":
		return 1
	case strings.HasPrefix(attr, "iosched/"):
		return 2
	}
	for i, t := range Tunables {
		if t == attr {
			return 3 + i
		}
	}
	return 3 + len(Tunables)
}

// Resets reports whether writing attribute written may change the value of
// attr on the same disk, so attr must be read again after it. Measured on
// kernel 6.18 loop devices:
//   - a scheduler switch sets nr_requests anew (blk_mq_init_sched: twice the
//     tag depth for an elevator, the depth for none), turns writeback
//     throttling off for bfq and on again when it leaves (wbt_lat_usec 0 <->
//     2000), and brings the new scheduler's iosched/* defaults;
//   - writing nr_requests sets mq-deadline's iosched/async_depth to it
//     (dd_depth_updated).
func Resets(written, attr string) bool {
	switch written {
	case "scheduler":
		return attr == "nr_requests" || attr == "wbt_lat_usec" || strings.HasPrefix(attr, "iosched/")
	case "nr_requests":
		return attr == "iosched/async_depth"
	}
	return false
}

// SchedulerParams are the queue/iosched/ files of the mainline schedulers
// (block/mq-deadline.c, block/bfq-iosched.c, block/kyber-iosched.c).
// Schedulers not listed (out of tree) may have any.
var SchedulerParams = map[string][]string{
	"mq-deadline": {"async_depth", "fifo_batch", "front_merges", "prio_aging_expire", "read_expire", "write_expire", "writes_starved"},
	"bfq": {"back_seek_max", "back_seek_penalty", "fifo_expire_async", "fifo_expire_sync", "low_latency", "max_budget",
		"slice_idle", "slice_idle_us", "strict_guarantees", "timeout_sync"},
	"kyber": {"read_lat_nsec", "write_lat_nsec"},
}

// HasParam reports whether scheduler has the iosched parameter param: false
// only when it is a mainline scheduler known not to have it.
func HasParam(scheduler, param string) bool {
	params, known := SchedulerParams[scheduler]
	if !known {
		return scheduler != "none"
	}
	for _, p := range params {
		if p == param {
			return true
		}
	}
	return false
}

// IsTunable reports whether name is one of Tunables.
func IsTunable(name string) bool {
	for _, t := range Tunables {
		if t == name {
			return true
		}
	}
	return false
}
