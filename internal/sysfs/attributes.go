package sysfs

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// Attr names an attribute under a disk's queue/ directory that iosched may
// set: "scheduler", a queue tunable ("nr_requests"), or a parameter of the
// active scheduler ("iosched/fifo_batch"). Its Kind says which.
type Attr string

// AttrKind is what sort of queue attribute an Attr is.
type AttrKind uint8

const (
	// KindUnknown is an attribute iosched does not manage.
	KindUnknown AttrKind = iota
	// KindScheduler is queue/scheduler, the elevator.
	KindScheduler
	// KindTunable is a file of queue/ itself.
	KindTunable
	// KindParam is a file of queue/iosched/: a parameter of the active
	// scheduler, there only while that scheduler runs.
	KindParam
)

func (k AttrKind) String() string {
	switch k {
	case KindScheduler:
		return "scheduler"
	case KindTunable:
		return "queue tunable"
	case KindParam:
		return "scheduler parameter"
	}
	return "unknown"
}

// paramPrefix is where a scheduler's parameters are, below queue/.
const paramPrefix = "iosched/"

// ParamAttr is the attribute of the scheduler parameter param.
func ParamAttr(param string) Attr { return Attr(paramPrefix + param) }

// Param is the parameter's name for a KindParam attribute ("fifo_batch"
// for "iosched/fifo_batch"), "" for any other.
func (a Attr) Param() string {
	p, ok := strings.CutPrefix(string(a), paramPrefix)
	if !ok {
		return ""
	}
	return p
}

// Kind says what a is. A parameter is KindParam whether or not the table
// knows it (kernels add parameters; out-of-tree schedulers have their own);
// a tunable is KindTunable only when the table has it.
func (a Attr) Kind() AttrKind {
	if strings.HasPrefix(string(a), paramPrefix) {
		return KindParam
	}
	if spec, ok := a.Spec(); ok {
		return spec.Kind
	}
	return KindUnknown
}

// Spec is a's entry in the table, if it has one.
func (a Attr) Spec() (AttrSpec, bool) {
	if i := specIndex(a); i >= 0 {
		return attrSpecs[i], true
	}
	return AttrSpec{}, false
}

// Settable reports whether iosched may read and write a: a scheduler, a
// parameter, or a tunable of the table that is not refused.
func (a Attr) Settable() bool {
	spec, known := a.Spec()
	switch a.Kind() {
	case KindScheduler, KindParam:
		return true
	case KindTunable:
		return known && spec.Refused == ""
	}
	return false
}

// Range is what the kernel accepts for an attribute and reads back
// unchanged. A value the kernel would clamp or round (nr_requests below 4,
// read_ahead_kb not a whole page) or that means "reset to the default"
// (wbt_lat_usec -1, max_sectors_kb 0) is outside it: iosched compares what
// it reads with what the policy says, and such a value would never compare
// equal, so every plan and every reconcile would write it again.
type Range struct {
	Min, Max int64
	// Multiple, when above 1, is what every value must be a multiple of.
	Multiple int64
	// Why explains a bound a reader would not guess, for error messages.
	Why string
}

// AttrSpec is one attribute iosched may set, and what holds for it.
type AttrSpec struct {
	Attr Attr
	Kind AttrKind
	// Scheduler is, for a parameter, the mainline scheduler that has it.
	Scheduler string
	Range     Range
	// MQOnly: the kernel hides it on a bio-based queue
	// (block/blk-sysfs.c, blk_mq_queue_attr_visible).
	MQOnly bool
	// Rank orders the writes to one disk, lowest first, so that no write
	// undoes an earlier one (see Resets). Equal ranks go in table order,
	// parameters by name.
	Rank int
	// Resets are the attributes a write to this one may change; AllParams
	// stands for every parameter of the scheduler.
	Resets []Attr
	// Refused, when not "", is why a policy may not set it: iosched never
	// reads or writes it.
	Refused string
}

// AllParams in AttrSpec.Resets stands for every scheduler parameter.
const AllParams Attr = paramPrefix + "*"

// Write ranks: the scheduler first (switching it resets much of the rest),
// then nr_requests (writing it resets a parameter), then the scheduler's
// parameters, then the other tunables.
const (
	rankScheduler = iota
	rankNrRequests
	rankParam
	rankTunable
	rankUnknown
)

// uintMax is the largest value queue_var_store accepts (block/blk-sysfs.c:
// kstrtoul, then v > UINT_MAX is -EINVAL).
const uintMax = math.MaxUint32

// intParam is the range of a parameter parsed with kstrtoint, as mq-deadline
// and bfq parse theirs (EINVAL above INT_MAX).
var intParam = Range{Min: 0, Max: math.MaxInt32}

// attrSpecs is the table of every attribute iosched sets, queue tunables in
// the order they are shown. The resets were measured on kernel 6.18 loop
// devices:
//   - a scheduler switch sets nr_requests anew (blk_mq_init_sched: twice the
//     tag depth for an elevator, the depth for none), turns writeback
//     throttling off for bfq and on again when it leaves (wbt_lat_usec 0 <->
//     2000), and brings the new scheduler's iosched/* defaults;
//   - writing nr_requests sets mq-deadline's iosched/async_depth to it
//     (dd_depth_updated).
//
// The parameters are those of the mainline schedulers (block/mq-deadline.c,
// block/bfq-iosched.c, block/kyber-iosched.c); schedulers not listed (out of
// tree) may have any.
var attrSpecs = []AttrSpec{
	{Attr: "scheduler", Kind: KindScheduler, Rank: rankScheduler, Resets: []Attr{"nr_requests", "wbt_lat_usec", AllParams}},

	// ra_pages = ra_kb >> (PAGE_SHIFT - 10): the value reads back rounded
	// down to whole pages; 4 KiB is the smallest page size.
	{Attr: "read_ahead_kb", Kind: KindTunable, Rank: rankTunable, Range: Range{Min: 0, Max: uintMax, Multiple: 4, Why: "the kernel keeps whole 4 KiB pages"}},
	// queue_requests_store raises anything below BLKDEV_MIN_RQ (4) to 4.
	{Attr: "nr_requests", Kind: KindTunable, Rank: rankNrRequests, MQOnly: true, Resets: []Attr{"iosched/async_depth"},
		Range: Range{Min: 4, Max: uintMax, Why: "the kernel raises smaller values to 4 (BLKDEV_MIN_RQ)"}},
	{Attr: "nomerges", Kind: KindTunable, Rank: rankTunable, Range: Range{Min: 0, Max: 2}},
	{Attr: "rq_affinity", Kind: KindTunable, Rank: rankTunable, MQOnly: true, Range: Range{Min: 0, Max: 2}},
	{Attr: "add_random", Kind: KindTunable, Rank: rankTunable, Range: Range{Min: 0, Max: 1}},
	{Attr: "iostats", Kind: KindTunable, Rank: rankTunable, Range: Range{Min: 0, Max: 1}},
	// queue_wb_lat_store: -1 restores the default, which then reads back as
	// its value; below -1 is -EINVAL. The value is multiplied by 1000 in an
	// s64.
	{Attr: "wbt_lat_usec", Kind: KindTunable, Rank: rankTunable, MQOnly: true,
		Range: Range{Min: 0, Max: math.MaxInt64 / 1000, Why: "-1 (restore the default) reads back as the default's value, so iosched could never see it in place: write the value itself"}},
	// queue_max_sectors_store: 0 restores the default (same problem), below
	// one page is -EINVAL.
	{Attr: "max_sectors_kb", Kind: KindTunable, Rank: rankTunable,
		Range: Range{Min: 4, Max: uintMax, Why: "0 (restore the default) reads back as the default's value, and less than one page is refused by the kernel"}},
	// queue_io_timeout_store: kstrtou32, 0 is -EINVAL. In milliseconds.
	{Attr: "io_timeout", Kind: KindTunable, Rank: rankTunable, MQOnly: true, Range: Range{Min: 1, Max: uintMax, Why: "milliseconds; the kernel refuses 0"}},
	// queue_poll_store (block/blk-sysfs.c) on current kernels: EINVAL
	// without BLK_FEAT_POLL, else the write is accepted and ignored.
	{Attr: "io_poll", Kind: KindTunable, Rank: rankTunable, MQOnly: true,
		Refused: "the kernel ignores writes to it: a queue without polling answers EINVAL, one with polling accepts the write and changes nothing (it logs \"writes to the poll attribute are ignored\"); polling comes from the driver's poll queues, such as the nvme module's poll_queues parameter"},

	{Attr: "iosched/async_depth", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/fifo_batch", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/front_merges", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/prio_aging_expire", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/read_expire", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/write_expire", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},
	{Attr: "iosched/writes_starved", Kind: KindParam, Scheduler: "mq-deadline", Rank: rankParam, Range: intParam},

	{Attr: "iosched/back_seek_max", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/back_seek_penalty", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/fifo_expire_async", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/fifo_expire_sync", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/low_latency", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/max_budget", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/slice_idle", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/slice_idle_us", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/strict_guarantees", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},
	{Attr: "iosched/timeout_sync", Kind: KindParam, Scheduler: "bfq", Rank: rankParam, Range: intParam},

	// kyber's latency targets are u64 (kstrtoull); TOML integers stop at
	// the int64 maximum.
	{Attr: "iosched/read_lat_nsec", Kind: KindParam, Scheduler: "kyber", Rank: rankParam, Range: Range{Min: 0, Max: math.MaxInt64}},
	{Attr: "iosched/write_lat_nsec", Kind: KindParam, Scheduler: "kyber", Rank: rankParam, Range: Range{Min: 0, Max: math.MaxInt64}},
}

// Attributes returns the table of attributes iosched sets, queue tunables in
// the order they are shown. The entries are shared: do not modify them.
func Attributes() []AttrSpec { return slices.Clone(attrSpecs) }

func specIndex(a Attr) int {
	for i := range attrSpecs {
		if attrSpecs[i].Attr == a {
			return i
		}
	}
	return -1
}

// Tunables lists the queue tunables iosched reads and may set, in the order
// they are shown. Nothing outside them, the scheduler and the parameters
// is ever written.
func Tunables() []Attr {
	var out []Attr
	for t := range tunableBits {
		out = append(out, t)
	}
	return out
}

// Resets reports whether writing a may change the value of other on the
// same disk, so other must be read again after it.
func (a Attr) Resets(other Attr) bool {
	spec, ok := a.Spec()
	if !ok {
		return false
	}
	for _, r := range spec.Resets {
		if r == other || r == AllParams && other.Kind() == KindParam {
			return true
		}
	}
	return false
}

// writeKey places a in write order: its rank, then its place in the table
// (parameters, independent of each other, go by name instead).
func (a Attr) writeKey() (rank, place int) {
	i := specIndex(a)
	switch {
	case a.Kind() == KindParam:
		return rankParam, 0
	case i < 0:
		return rankUnknown, 0
	}
	return attrSpecs[i].Rank, i
}

// CompareWriteOrder orders two attributes as they must be written to one
// disk, so that no write undoes an earlier one: by AttrSpec.Rank (the
// scheduler, nr_requests, the parameters, the other tunables), then table
// order, then name. It returns -1, 0 or +1, as cmp.Compare.
func CompareWriteOrder(a, b Attr) int {
	ra, pa := a.writeKey()
	rb, pb := b.writeKey()
	if c := cmp.Compare(ra, rb); c != 0 {
		return c
	}
	if c := cmp.Compare(pa, pb); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// SortByWriteOrder sorts s by the write order of the attribute attr names
// for each element (CompareWriteOrder); elements of one attribute keep their
// order.
func SortByWriteOrder[T any](s []T, attr func(T) string) {
	slices.SortStableFunc(s, func(x, y T) int { return CompareWriteOrder(Attr(attr(x)), Attr(attr(y))) })
}

// HasParam reports whether scheduler has the parameter param: false only
// when it is a mainline scheduler known not to have it, or none.
func HasParam(scheduler, param string) bool {
	if scheduler == "none" {
		return false
	}
	mainline := false
	for _, spec := range attrSpecs {
		if spec.Kind == KindParam && spec.Scheduler == scheduler {
			if spec.Attr.Param() == param {
				return true
			}
			mainline = true
		}
	}
	return !mainline
}
