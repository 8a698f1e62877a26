package adaptopt

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Options say how an adaptive rule judges a disk. Fields are named as
// [rule.adapt]'s keys (Problem.Keys gives the keys).
type Options struct {
	// Sample is how often the disk's operating point is read.
	Sample time.Duration
	// Window is how long the same candidate must be favoured before a
	// switch, and the span the operating point is judged on.
	Window time.Duration
	// Margin is a fraction (0.10 for 10%): the favoured candidate must be
	// expected to beat the current scheduler by more than this, and the
	// guard rail switches back when latency per I/O got worse by more.
	Margin float64
	// MinInterval is the least time between two switches of one disk.
	MinInterval time.Duration
	// MaxSwitchesPerDay bounds the switches of one disk in any 24 hours.
	MaxSwitchesPerDay int
	// Guard turns on the guard rail: after a switch, compare latency per
	// I/O at a similar operating point; worse by more than Margin
	// switches back and pins the disk for a day.
	Guard bool
}

// Default is what an empty [rule.adapt] asks for.
func Default() Options {
	return Options{
		Sample:            5 * time.Second,
		Window:            10 * time.Minute,
		Margin:            0.10,
		MinInterval:       time.Hour,
		MaxSwitchesPerDay: 6,
		Guard:             true,
	}
}

// Limits of [rule.adapt]. Tests run windows of seconds, so the shortest
// sample is short.
const (
	// MinSample keeps a typo ("5ms" for "5s") from reading every disk's
	// stat file hundreds of times a second.
	MinSample = 100 * time.Millisecond
	MaxSample = 10 * time.Minute
	// MinWindowSamples: a window of one or two samples is one burst, not
	// an operating point.
	MinWindowSamples = 3
	// MaxWindowSamples bounds the samples that must each agree before a
	// switch (at the default sample, a window of up to 2.8 hours). A
	// disk's memory does not depend on it: the controller keeps its
	// window in fixed-size slots.
	MaxWindowSamples = 2048
	// MinMargin: without a margin a load at the crossing would be judged
	// on noise; the margin is the hysteresis.
	MinMargin         = 0.01
	MaxMargin         = 0.5
	MaxMinInterval    = 7 * 24 * time.Hour
	MaxSwitchesPerDay = 96
)

// Problem is one thing wrong with options.
type Problem struct {
	// Keys are the [rule.adapt] keys the problem is about: one, or two
	// for a limit on both together (sample and window).
	Keys []string
	Msg  string
}

func (p Problem) String() string {
	return strings.Join(p.Keys, " and ") + ": " + p.Msg
}

// Problems checks o against the limits: what is wrong, nil when nothing.
// A check that needs two fields is made only when each passed its own.
func (o *Options) Problems() []Problem {
	var ps []Problem
	add := func(keys []string, format string, a ...any) {
		ps = append(ps, Problem{Keys: keys, Msg: fmt.Sprintf(format, a...)})
	}
	sampleOK := o.Sample >= MinSample && o.Sample <= MaxSample
	if !sampleOK {
		add([]string{"sample"}, "%s is outside %s..%s", o.Sample, MinSample, MaxSample)
	}
	windowOK := o.Window > 0
	if !windowOK {
		add([]string{"window"}, "%s is not a positive duration", o.Window)
	}
	if sampleOK && windowOK {
		switch n := o.Window / o.Sample; {
		case o.Window <= o.Sample:
			add([]string{"sample", "window"}, "the window (%s) is not longer than a sample (%s): want at least %d samples a window",
				o.Window, o.Sample, MinWindowSamples)
		case n < MinWindowSamples:
			add([]string{"sample", "window"}, "the window (%s) holds %d samples of %s: want at least %d, or one burst would decide",
				o.Window, n, o.Sample, MinWindowSamples)
		case n > MaxWindowSamples:
			add([]string{"sample", "window"}, "the window (%s) holds %d samples of %s: at most %d (a longer sample or a shorter window)",
				o.Window, n, o.Sample, MaxWindowSamples)
		}
	}
	if o.Margin < MinMargin || o.Margin > MaxMargin {
		add([]string{"margin"}, "%s%% is outside %s%%..%s%%", percent(o.Margin), percent(MinMargin), percent(MaxMargin))
	}
	if o.MinInterval < 0 || o.MinInterval > MaxMinInterval {
		add([]string{"min_interval"}, "%s is outside 0s..%s", o.MinInterval, MaxMinInterval)
	}
	if o.MaxSwitchesPerDay < 1 || o.MaxSwitchesPerDay > MaxSwitchesPerDay {
		add([]string{"max_switches_per_day"}, "%d is outside 1..%d", o.MaxSwitchesPerDay, MaxSwitchesPerDay)
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
	return fmt.Errorf("adapt options: %s", strings.Join(msgs, "; "))
}

// percent writes a fraction as a percentage without float noise.
func percent(f float64) string { return strconv.FormatFloat(f*100, 'g', 6, 64) }
