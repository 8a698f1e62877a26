package probeopt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/sysfs"
)

// Options say how to probe a disk. Fields are named as [rule.probe]'s keys
// (Problem.Key gives the key).
type Options struct {
	// Candidates are the schedulers to compare (at least two the disk
	// offers). The incumbent is the disk's current scheduler when it is
	// one of them, else the first.
	Candidates []string
	// Duration is each measurement's length.
	Duration time.Duration
	Rounds   int
	// Depth is the deep-queue measurement's reads in flight.
	Depth int
	// Depths are the curve's depths, ascending, each once: the reads in
	// flight of one measurement each, per candidate and round. A probe
	// caps them at the disk's hardware queue depth.
	Depths    []int
	BlockSize int
	// Engine is one of EngineNames, or "" for the first of them the
	// kernel allows.
	Engine string
	// Choose is ChooseBalanced, ChooseIOPS or ChooseLatency.
	Choose string
	// Margin is a fraction: 0.05 for 5%.
	Margin float64
	// NrRequests, when set, makes the scheduler's pool of requests
	// (queue/nr_requests) a second candidate dimension: each scheduler
	// is measured with each value, NrRequestsDefault standing for the
	// value the kernel gives that scheduler on that disk (what it reads
	// back after a switch to it). Nil measures each scheduler with its
	// default only.
	NrRequests []int
}

// NrRequestsDefault in Options.NrRequests is the kernel's value for the
// scheduler on the disk ("default" in [rule.probe] and --nr-requests).
const NrRequestsDefault = 0

// What a probe optimises for; package probe's Decide says what each means.
const (
	ChooseBalanced = "balanced"
	ChooseIOPS     = "iops"
	ChooseLatency  = "latency"
)

// Engine names.
const (
	EngineIOUring = "io_uring"
	EnginePsync   = "psync"
)

// EngineInfo is what is known of a probe engine without its code.
type EngineInfo struct {
	Name string
	// SeesPunting: the engine's samples count how often io_uring's worker
	// threads ran, so a report can say whether reads were punted out of
	// line.
	SeesPunting bool
}

// engines is the one list of probe engines, in the order Engine "" tries
// them (the first the kernel allows is used). It is here, apart from the
// engines' code, so that the policy can validate a name without the code
// that reads disks; package probe attaches each engine's constructor to
// its name, and its TestEngineTable fails while an entry has none.
var engines = []EngineInfo{
	{Name: EngineIOUring, SeesPunting: true},
	{Name: EnginePsync},
}

// Engines returns the engines, in the order they are tried when Engine is
// "".
func Engines() []EngineInfo { return slices.Clone(engines) }

// EngineNames returns the engines' names, in the order they are tried
// when Engine is "".
func EngineNames() []string {
	names := make([]string, len(engines))
	for i, e := range engines {
		names[i] = e.Name
	}
	return names
}

// Limits of a probe. They keep a typo from holding a disk for hours
// ("10m" for "10s"); the longest probe these allow, 8 candidates x 15
// rounds x (10 measurements of 10 s + warm-up), is over 3 hours, and
// says so before it starts.
const (
	MinDuration = 10 * time.Millisecond
	MaxDuration = 10 * time.Second
	MaxRounds   = 15
	MaxDepth    = 1024
	// MaxDepths is the most points a curve has.
	MaxDepths     = 8
	MinBlockSize  = 512
	MaxBlockSize  = 1 << 20
	MaxMargin     = 0.5
	MaxCandidates = 8
	// MinNrRequests is the kernel's floor for nr_requests (BLKDEV_MIN_RQ
	// in include/linux/blkdev.h: a smaller write is raised to it), and
	// MaxNrRequests its ceiling with a scheduler (MAX_SCHED_RQ in
	// block/blk-mq-sched.h, 16 x BLKDEV_DEFAULT_RQ).
	MinNrRequests = 4
	MaxNrRequests = 2048
	// MaxPairs bounds the (scheduler, nr_requests) pairs measured: each
	// is a measurement per depth and round, as a candidate is.
	MaxPairs = 8
	// MaxInFlight bounds depth x block size: a probe maps and populates a
	// buffer that large, and the psync engine starts one thread per unit
	// of depth.
	MaxInFlight = 64 << 20
)

// Default is what an empty [rule.probe] and `iosched probe` without flags
// ask for.
func Default() Options {
	return Options{
		Candidates: []string{"none", "mq-deadline"},
		// 400 ms a measurement keeps the default probe of a disk that
		// answers at once, 2 candidates x 3 rounds x 5 depths (the
		// curve's four and the deep-queue 32), within 15 s (probe's
		// Options.Budget); a slow disk's drops the depths where its
		// IOPS no longer grows.
		Duration: 400 * time.Millisecond,
		Rounds:   3,
		Depth:    32,
		// A depth per factor of four, from one request at a time to
		// 64: each point costs a measurement per candidate and round,
		// and four keep the default probe within its 15 s.
		Depths:    []int{1, 4, 16, 64},
		BlockSize: 4096,
		Choose:    ChooseBalanced,
		Margin:    0.05,
	}
}

// WithDefaults fills the zero fields from Default, but Engine ("" is a
// choice) and Margin (0 is a margin of 0%). Depths is filled when nil; an
// empty list is left for Problems to refuse.
func (o Options) WithDefaults() Options {
	d := Default()
	if len(o.Candidates) == 0 {
		o.Candidates = d.Candidates
	}
	if o.Duration == 0 {
		o.Duration = d.Duration
	}
	if o.Rounds == 0 {
		o.Rounds = d.Rounds
	}
	if o.Depth == 0 {
		o.Depth = d.Depth
	}
	if o.Depths == nil {
		o.Depths = d.Depths
	}
	if o.BlockSize == 0 {
		o.BlockSize = d.BlockSize
	}
	if o.Choose == "" {
		o.Choose = d.Choose
	}
	return o
}

// Problem is one thing wrong with options.
type Problem struct {
	// Keys are the [rule.probe] keys the problem is about: one, or two
	// for a limit on both together (depth and block_size).
	Keys []string
	// Elem is the index of the element at fault when Keys is a list
	// (candidates, depths) and one of its elements is, else -1.
	Elem int
	Msg  string
}

func (p Problem) String() string {
	return strings.Join(p.Keys, " and ") + ": " + p.Msg
}

// Problems checks o against the limits: what is wrong, nil when nothing.
// A check that needs two fields is made only when each passed its own.
func (o *Options) Problems() []Problem {
	var ps []Problem
	add := func(key string, elem int, format string, a ...any) {
		ps = append(ps, Problem{Keys: []string{key}, Elem: elem, Msg: fmt.Sprintf(format, a...)})
	}
	var good []string
	for i, c := range o.Candidates {
		switch {
		case !sysfs.ValidSchedulerName(c):
			add("candidates", i, "%q is not a scheduler name", c)
		case slices.Contains(good, c):
			add("candidates", i, "%s is named twice", c)
		default:
			good = append(good, c)
		}
	}
	switch {
	case len(good) != len(o.Candidates):
	case len(good) < 2 && (len(good) == 0 || len(o.NrRequests) < 2):
		add("candidates", -1, "want at least two schedulers to compare (or one, with two nr_requests), not %d", len(good))
	case len(good) > MaxCandidates:
		add("candidates", -1, "%d schedulers: at most %d", len(good), MaxCandidates)
	}
	seenNr := map[int]bool{}
	for i, n := range o.NrRequests {
		switch {
		case n != NrRequestsDefault && (n < MinNrRequests || n > MaxNrRequests):
			add("nr_requests", i, "%d is outside %d..%d (or \"default\", the kernel's value for the scheduler)", n, MinNrRequests, MaxNrRequests)
		case seenNr[n]:
			add("nr_requests", i, "%s is named twice", NrRequestsText(n))
		}
		seenNr[n] = true
	}
	if np := len(good) * max(len(o.NrRequests), 1); len(good) == len(o.Candidates) && len(good) >= 2 && len(o.NrRequests) > 1 && np > MaxPairs {
		ps = append(ps, Problem{Keys: []string{"candidates", "nr_requests"}, Elem: -1, Msg: fmt.Sprintf(
			"%d schedulers x %d nr_requests are %d pairs to measure: at most %d", len(good), len(o.NrRequests), np, MaxPairs)})
	}
	if o.Duration < MinDuration || o.Duration > MaxDuration {
		add("duration", -1, "%s is outside %s..%s", o.Duration, MinDuration, MaxDuration)
	}
	if o.Rounds < 1 || o.Rounds > MaxRounds {
		add("rounds", -1, "%d is outside 1..%d", o.Rounds, MaxRounds)
	}
	depthOK := o.Depth >= 1 && o.Depth <= MaxDepth
	if !depthOK {
		add("depth", -1, "%d is outside 1..%d", o.Depth, MaxDepth)
	}
	deepest, depthsOK := o.depthsProblems(add)
	if err := CheckBlockSize(o.BlockSize); err != nil {
		add("block_size", -1, "%v", err)
	} else {
		inFlight := func(key, what string, depth int) {
			if depth*o.BlockSize > MaxInFlight {
				ps = append(ps, Problem{Keys: []string{key, "block_size"}, Elem: -1, Msg: fmt.Sprintf(
					"%s %d x block size %s is %s in flight: at most %s (the probe maps a buffer that size, and psync starts a thread per depth)",
					what, depth, formatBytes(o.BlockSize), formatBytes(depth*o.BlockSize), formatBytes(MaxInFlight))})
			}
		}
		if depthOK {
			inFlight("depth", "depth", o.Depth)
		}
		if depthsOK {
			inFlight("depths", "the deepest of depths,", deepest)
		}
	}
	if names := EngineNames(); o.Engine != "" && !slices.Contains(names, o.Engine) {
		add("engine", -1, "%q is not an engine: %s", o.Engine, quotedList(names))
	}
	switch o.Choose {
	case ChooseBalanced, ChooseIOPS, ChooseLatency:
	default:
		add("choose", -1, "%q is not a choice: %q (deep-queue IOPS without a depth-1 p99 regression), %q or %q",
			o.Choose, ChooseBalanced, ChooseIOPS, ChooseLatency)
	}
	if o.Margin < 0 || o.Margin > MaxMargin {
		add("margin", -1, "%s%% is outside 0%%..%s%%", percent(o.Margin), percent(MaxMargin))
	}
	return ps
}

// depthsProblems checks Depths alone: its length, each depth's range, and
// their order, each problem at the depth at fault. It returns the deepest,
// and whether Depths passed.
func (o *Options) depthsProblems(add func(key string, elem int, format string, a ...any)) (int, bool) {
	switch {
	case len(o.Depths) == 0:
		add("depths", -1, "want at least one depth, such as [1, 4, 16, 64]")
		return 0, false
	case len(o.Depths) > MaxDepths:
		add("depths", -1, "%d depths: at most %d", len(o.Depths), MaxDepths)
		return 0, false
	}
	ok := true
	for i, d := range o.Depths {
		switch {
		case d < 1 || d > MaxDepth:
			add("depths", i, "%d is outside 1..%d", d, MaxDepth)
			ok = false
		case i > 0 && d <= o.Depths[i-1]:
			add("depths", i, "%d after %d: depths ascend, each once", d, o.Depths[i-1])
			ok = false
		}
	}
	return o.Depths[len(o.Depths)-1], ok
}

// NrRequestsText is n as [rule.probe] writes it: "default" for
// NrRequestsDefault.
func NrRequestsText(n int) string {
	if n == NrRequestsDefault {
		return "default"
	}
	return strconv.Itoa(n)
}

// ParseNrRequests reads one nr_requests candidate: "default" or a number.
// Its range is Problems' to check.
func ParseNrRequests(s string) (int, error) {
	if s == "default" {
		return NrRequestsDefault, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n == NrRequestsDefault {
		return 0, fmt.Errorf("%q is not an nr_requests: want \"default\" or a number of requests, such as 64", s)
	}
	return n, nil
}

// Validate returns o's problems as one error, nil when it has none.
func (o *Options) Validate() error {
	ps := o.Problems()
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.String()
	}
	return fmt.Errorf("probe options: %s", strings.Join(msgs, "; "))
}

// CheckBlockSize says what is wrong with a block size alone: it must be a
// power of two (O_DIRECT reads are aligned to it) within the limits.
func CheckBlockSize(n int) error {
	switch {
	case n < MinBlockSize || n > MaxBlockSize:
		return fmt.Errorf("%s is outside %s..%s", formatBytes(n), formatBytes(MinBlockSize), formatBytes(MaxBlockSize))
	case n&(n-1) != 0:
		return fmt.Errorf("%s is not a power of two", formatBytes(n))
	}
	return nil
}

// formatBytes writes n in the largest binary unit that divides it, as the
// policy writes sizes.
func formatBytes(n int) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{50, "PiB"}, {40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return strconv.Itoa(n>>u.shift) + u.name
		}
	}
	return strconv.Itoa(n) + "B"
}

// percent writes a fraction as a percentage without float noise
// (0.07 is "7", not "7.000000000000001").
func percent(f float64) string { return strconv.FormatFloat(f*100, 'g', 6, 64) }

func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
