package policy

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/iosched/iosched/sysfs"
)

// Probe is a [rule.probe] table: measure each candidate scheduler on the
// disk, then keep the winner. Unset keys have DefaultProbe's values.
type Probe struct {
	Candidates []string
	// Duration is each measurement's length.
	Duration time.Duration
	Rounds   int
	// Depth is the deep-queue measurement's reads in flight.
	Depth     int
	BlockSize int
	// Engine is "io_uring", "psync", or "" (io_uring where the kernel
	// allows it).
	Engine string
	// Choose is "balanced", "iops" or "latency".
	Choose string
	// Margin is a fraction (0.05 for 5%).
	Margin float64
	// MaxAge is how long a remembered result holds; 0 is for ever.
	MaxAge time.Duration
}

// Limits of a probe, for [rule.probe] and `iosched probe` alike. They keep a
// typo from holding a disk for an hour ("10m" for "10s"): the longest probe
// these allow is 8 candidates x 15 rounds x (2 x 10 s + warm-up).
const (
	ProbeMinDuration   = 10 * time.Millisecond
	ProbeMaxDuration   = 10 * time.Second
	ProbeMaxRounds     = 15
	ProbeMaxDepth      = 1024
	ProbeMinBlockSize  = 512
	ProbeMaxBlockSize  = 1 << 20
	ProbeMaxMargin     = 0.5
	ProbeMaxCandidates = 8
	// ProbeMaxInFlight bounds depth x block size: a probe maps and
	// populates a buffer that large, and the psync engine starts one
	// thread per unit of depth.
	ProbeMaxInFlight = 64 << 20
)

// DefaultProbe is what an empty [rule.probe] means.
func DefaultProbe() Probe {
	return Probe{
		Candidates: []string{"none", "mq-deadline"},
		Duration:   time.Second,
		Rounds:     3,
		Depth:      32,
		BlockSize:  4096,
		Choose:     "balanced",
		Margin:     0.05,
	}
}

// Default values of the [daemon] probe keys.
const DefaultProbeConcurrency = 1

// CheckProbeBlockSize says what is wrong with a probe's block size: it must
// be a power of two (O_DIRECT reads are aligned to it) within the limits.
func CheckProbeBlockSize(n uint64) error {
	switch {
	case n < ProbeMinBlockSize || n > ProbeMaxBlockSize:
		return fmt.Errorf("%s is outside %s..%s", formatBytes(n), formatBytes(ProbeMinBlockSize), formatBytes(ProbeMaxBlockSize))
	case n&(n-1) != 0:
		return fmt.Errorf("%s is not a power of two", formatBytes(n))
	}
	return nil
}

// CheckProbeInFlight says what is wrong with a probe's depth and block
// size together (each within its own limits): their product, the bytes in
// flight at once, is at most ProbeMaxInFlight.
func CheckProbeInFlight(depth, blockSize uint64) error {
	if depth*blockSize > ProbeMaxInFlight {
		return fmt.Errorf("depth %d x block size %s is %s in flight: at most %s (the probe maps a buffer that size, and psync starts a thread per depth)",
			depth, formatBytes(blockSize), formatBytes(depth*blockSize), formatBytes(ProbeMaxInFlight))
	}
	return nil
}

// ParseSize reads a size as the policy does: "4KiB", "4K", "4096".
func ParseSize(s string) (uint64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return parseBytes(n)
	}
	return parseBytes(s)
}

// ParseMargin reads a percentage, "5%", as a fraction (0.05).
func ParseMargin(s string) (float64, error) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return 0, fmt.Errorf("%q is not a percentage: want a number and %%, such as \"5%%\"", s)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a percentage: want a number and %%, such as \"5%%\"", s)
	}
	if f < 0 || f/100 > ProbeMaxMargin {
		return 0, fmt.Errorf("%s is outside 0%%..%g%%", s, ProbeMaxMargin*100)
	}
	return f / 100, nil
}

// ParseMaxAge reads a Go duration, or whole days ("30d"); "0" is for ever.
func ParseMaxAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration: want \"720h\", \"30d\" or \"0\" (for ever)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: want \"720h\", \"30d\" or \"0\" (for ever)", s)
	case d < 0:
		return 0, fmt.Errorf("%s is negative", s)
	case d > 0 && d < time.Minute:
		return 0, fmt.Errorf("%s is shorter than a minute: every start would probe again", s)
	}
	return d, nil
}

// Probe returns the rule's [rule.probe], nil when it has none.
func (r *Rule) Probe() *Probe { return r.probe }

// ProbeFor returns the [rule.probe] in force for d: the last matching rule's
// that has one (a later rule overrides an earlier one's table whole), and
// that rule's name; nil when no matching rule probes.
func (p *Policy) ProbeFor(d *sysfs.Device) (*Probe, string) {
	var out *Probe
	var rule string
	for _, r := range p.Rules {
		if r.probe == nil {
			continue
		}
		if ok, _ := r.Matches(d); ok {
			out, rule = r.probe, r.Name
		}
	}
	return out, rule
}

var probeKeys = []string{"candidates", "duration", "rounds", "depth", "block_size", "engine", "choose", "margin", "max_age"}

// probeTable reads [rule.probe].
func (d *decoder) probeTable(l loc, v any) *Probe {
	m, ok := d.table(l, v, "[rule.probe]")
	if !ok {
		return nil
	}
	p := DefaultProbe()
	// Where depth x block size is reported: the later of the two keys
	// given that passed its own check.
	var sizeLoc *loc
	for _, k := range d.keys(l, m) {
		kl := l.child(k)
		v := m[k]
		switch k {
		case "candidates":
			list, ok := v.([]any)
			if !ok {
				d.errorf(kl, "want a list of at least two schedulers, such as [\"none\", \"mq-deadline\"], not %s", typeName(v))
				continue
			}
			names, ok := d.stringList(kl, list)
			if !ok {
				continue
			}
			var good []string
			for i, s := range names {
				switch {
				case !sysfs.ValidSchedulerName(s):
					d.errorf(kl.elem(i), "%q is not a scheduler name", s)
				case contains(good, s):
					d.errorf(kl.elem(i), "%s is named twice", s)
				default:
					good = append(good, s)
				}
			}
			switch {
			case len(good) != len(names):
			case len(good) < 2:
				d.errorf(kl, "want at least two schedulers to compare, not %d", len(good))
			case len(good) > ProbeMaxCandidates:
				d.errorf(kl, "%d schedulers: at most %d", len(good), ProbeMaxCandidates)
			default:
				p.Candidates = good
			}
		case "duration":
			s, ok := d.str(kl, v)
			if !ok {
				continue
			}
			dur, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(kl, "%q is not a duration: want a number with a unit, such as \"1s\" or \"500ms\"", s)
			case dur < ProbeMinDuration || dur > ProbeMaxDuration:
				d.errorf(kl, "%s is outside %s..%s", s, ProbeMinDuration, ProbeMaxDuration)
			default:
				p.Duration = dur
			}
		case "rounds":
			if n, ok := d.integer(kl, v); ok {
				if n < 1 || n > ProbeMaxRounds {
					d.errorf(kl, "%d is outside 1..%d", n, ProbeMaxRounds)
				} else {
					p.Rounds = int(n)
				}
			}
		case "depth":
			if n, ok := d.integer(kl, v); ok {
				if n < 1 || n > ProbeMaxDepth {
					d.errorf(kl, "%d is outside 1..%d", n, ProbeMaxDepth)
				} else {
					p.Depth = int(n)
					sizeLoc = &kl
				}
			}
		case "block_size":
			n, err := parseBytes(v)
			if err == nil {
				err = CheckProbeBlockSize(n)
			}
			if err != nil {
				d.errorf(kl, "%v", err)
				continue
			}
			p.BlockSize = int(n)
			sizeLoc = &kl
		case "engine":
			if s, ok := d.str(kl, v); ok {
				if s != "io_uring" && s != "psync" {
					d.errorf(kl, "%q is not an engine: \"io_uring\" or \"psync\"", s)
				} else {
					p.Engine = s
				}
			}
		case "choose":
			if s, ok := d.str(kl, v); ok {
				if s != "balanced" && s != "iops" && s != "latency" {
					d.errorf(kl, "%q is not a choice: \"balanced\" (deep-queue IOPS without a depth-1 p99 regression), \"iops\" or \"latency\"", s)
				} else {
					p.Choose = s
				}
			}
		case "margin":
			s, ok := v.(string)
			if !ok {
				d.errorf(kl, "want a percentage as a string, such as \"5%%\", not %s", typeName(v))
				continue
			}
			if f, err := ParseMargin(s); err != nil {
				d.errorf(kl, "%v", err)
			} else {
				p.Margin = f
			}
		case "max_age":
			if s, ok := d.str(kl, v); ok {
				if a, err := ParseMaxAge(s); err != nil {
					d.errorf(kl, "%v", err)
				} else {
					p.MaxAge = a
				}
			}
		default:
			d.unknownKey(kl, k, probeKeys, "[rule.probe]")
		}
	}
	if sizeLoc != nil {
		if err := CheckProbeInFlight(uint64(p.Depth), uint64(p.BlockSize)); err != nil {
			d.errorf(*sizeLoc, "%v", err)
		}
	}
	return &p
}

// daemonProbeKey reads one of the [daemon] probe keys; false when k is not
// one.
func (d *decoder) daemonProbeKey(kl loc, k string, v any, out *Daemon) bool {
	switch k {
	case "probe_concurrency":
		if n, ok := d.integer(kl, v); ok {
			if n < 1 || n > 64 {
				d.errorf(kl, "%d is outside 1..64 (probes of different disks at once)", n)
			} else {
				out.ProbeConcurrency = int(n)
			}
		}
	case "probe_budget":
		if s, ok := d.str(kl, v); ok {
			b, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.errorf(kl, "%q is not a duration: want a number with a unit, such as \"5m\", or \"0\" for no limit", s)
			case b < 0:
				d.errorf(kl, "%s is negative; \"0\" is no limit", s)
			default:
				out.ProbeBudget = b
			}
		}
	case "probe_results":
		globs, ok := d.stringList(kl, v)
		if !ok {
			return true
		}
		var good []string
		for i, g := range globs {
			el := kl
			if _, isList := v.([]any); isList {
				el = kl.elem(i)
			}
			switch _, err := filepath.Match(g, ""); {
			case err != nil:
				d.errorf(el, "%q is not a valid glob: %v", g, err)
			case !filepath.IsAbs(g):
				d.errorf(el, "%q is not an absolute path", g)
			default:
				good = append(good, g)
			}
		}
		if len(good) == len(globs) {
			out.ProbeResults = good
		}
	default:
		return false
	}
	return true
}
