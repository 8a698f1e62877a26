package probeopt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iosched/iosched/sysfs"
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
	Depth     int
	BlockSize int
	// Engine is one of EngineNames, or "" for the first of them the
	// kernel allows.
	Engine string
	// Choose is ChooseBalanced, ChooseIOPS or ChooseLatency.
	Choose string
	// Margin is a fraction: 0.05 for 5%.
	Margin float64
}

// What a probe optimises for; package probe's Decide says what each means.
const (
	ChooseBalanced = "balanced"
	ChooseIOPS     = "iops"
	ChooseLatency  = "latency"
)

// Engine names. Each is an entry of package probe's engine table (its
// constructor and what it can report); TestEngineTable there fails when the
// names here and the table's disagree. They are listed here, apart from
// the engines, so that the policy can validate a name without the code
// that reads disks.
const (
	EngineIOUring = "io_uring"
	EnginePsync   = "psync"
)

// engineNames are the engines in the order of probe's table: with Engine
// "", the first one the kernel allows is used.
var engineNames = []string{EngineIOUring, EnginePsync}

// EngineNames returns the engines' names, in the order they are tried
// when Engine is "".
func EngineNames() []string { return slices.Clone(engineNames) }

// Limits of a probe. They keep a typo from holding a disk for an hour
// ("10m" for "10s"): the longest probe these allow is 8 candidates x 15
// rounds x (2 x 10 s + warm-up).
const (
	MinDuration   = 10 * time.Millisecond
	MaxDuration   = 10 * time.Second
	MaxRounds     = 15
	MaxDepth      = 1024
	MinBlockSize  = 512
	MaxBlockSize  = 1 << 20
	MaxMargin     = 0.5
	MaxCandidates = 8
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
		Duration:   time.Second,
		Rounds:     3,
		Depth:      32,
		BlockSize:  4096,
		Choose:     ChooseBalanced,
		Margin:     0.05,
	}
}

// WithDefaults fills the zero fields from Default, but Engine ("" is a
// choice) and Margin (0 is a margin of 0%).
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
	// Elem is the index of the candidate at fault when Keys is
	// candidates and one of them is, else -1.
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
	case len(good) < 2:
		add("candidates", -1, "want at least two schedulers to compare, not %d", len(good))
	case len(good) > MaxCandidates:
		add("candidates", -1, "%d schedulers: at most %d", len(good), MaxCandidates)
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
	if err := CheckBlockSize(o.BlockSize); err != nil {
		add("block_size", -1, "%v", err)
	} else if depthOK && o.Depth*o.BlockSize > MaxInFlight {
		ps = append(ps, Problem{Keys: []string{"depth", "block_size"}, Elem: -1, Msg: fmt.Sprintf(
			"depth %d x block size %s is %s in flight: at most %s (the probe maps a buffer that size, and psync starts a thread per depth)",
			o.Depth, formatBytes(o.BlockSize), formatBytes(o.Depth*o.BlockSize), formatBytes(MaxInFlight))})
	}
	if o.Engine != "" && !slices.Contains(engineNames, o.Engine) {
		add("engine", -1, "%q is not an engine: %s", o.Engine, quotedList(engineNames))
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
