package policy

import (
	"time"

	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/sysfs"
)

// The observe interval's limits are the adaptive sampler's: the same
// reading of the same file, under the same cost target.
const (
	MinObserve = adaptopt.MinSample
	MaxObserve = adaptopt.MaxSample
)

// Observe returns the rule's observe interval (its observe key), 0 when it
// has none.
func (r *Rule) Observe() time.Duration { return r.observe }

// ObserveFor returns the observe interval in force for d: the last
// matching rule's that has an observe key, and that rule's name; 0 when no
// matching rule observes, and then nothing reads the disk's counters for
// it.
func (p *Policy) ObserveFor(d *sysfs.Device) (time.Duration, string) {
	r := p.lastMatching(d, func(r *Rule) bool { return r.observe > 0 })
	if r == nil {
		return 0, ""
	}
	return r.observe, r.Name
}

// observeKey reads a rule's observe key: a duration string within
// MinObserve..MaxObserve. 0 when it is refused (the error is recorded).
func (d *decoder) observeKey(l loc, v any) time.Duration {
	s, ok := d.str(l, v)
	if !ok {
		return 0
	}
	dur, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.errorf(l, "%q is not a duration: want a number with a unit, such as \"5s\"", s)
	case dur < MinObserve || dur > MaxObserve:
		d.errorf(l, "%s is outside %s..%s", dur, MinObserve, MaxObserve)
	default:
		return dur
	}
	return 0
}
