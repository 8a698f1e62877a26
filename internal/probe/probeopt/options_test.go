package probeopt

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Each limit is reported against the key it is about (the policy reports
// it there), a candidate's by its index, and the limit on depth and block
// size together only when each passed its own.
func TestProblems(t *testing.T) {
	t.Parallel()
	d := Default()
	if ps := d.Problems(); ps != nil {
		t.Fatalf("defaults: %v", ps)
	}
	for _, name := range EngineNames() {
		o := Default()
		o.Engine = name
		if err := o.Validate(); err != nil {
			t.Errorf("engine %s: %v", name, err)
		}
	}
	for _, c := range []struct {
		edit func(*Options)
		want Problem
	}{
		{func(o *Options) { o.Candidates = []string{"none", "b@d"} }, Problem{[]string{"candidates"}, 1, `"b@d" is not a scheduler name`}},
		{func(o *Options) { o.Candidates = []string{"none", "none"} }, Problem{[]string{"candidates"}, 1, "none is named twice"}},
		{func(o *Options) { o.Candidates = []string{"none"} }, Problem{[]string{"candidates"}, -1, "want at least two schedulers to compare (or one, with two nr_requests), not 1"}},
		{func(o *Options) { o.Candidates = strings.Fields("a b c d e f g h i") }, Problem{[]string{"candidates"}, -1, "9 schedulers: at most 8"}},
		{func(o *Options) { o.Duration = 10 * time.Minute }, Problem{[]string{"duration"}, -1, "10m0s is outside 10ms..10s"}},
		{func(o *Options) { o.Rounds = 0 }, Problem{[]string{"rounds"}, -1, "0 is outside 1..15"}},
		{func(o *Options) { o.Depth = 5000 }, Problem{[]string{"depth"}, -1, "5000 is outside 1..1024"}},
		{func(o *Options) { o.BlockSize = 3072 }, Problem{[]string{"block_size"}, -1, "3KiB is not a power of two"}},
		{func(o *Options) { o.BlockSize = 4 << 20 }, Problem{[]string{"block_size"}, -1, "4MiB is outside 512B..1MiB"}},
		{func(o *Options) { o.Depth, o.BlockSize = 128, 1<<20 }, Problem{[]string{"depth", "block_size"}, -1,
			"depth 128 x block size 1MiB is 128MiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)"}},
		{func(o *Options) { o.Engine = "libaio" }, Problem{[]string{"engine"}, -1, `"libaio" is not an engine: "io_uring" or "psync"`}},
		{func(o *Options) { o.Choose = "fastest" }, Problem{[]string{"choose"}, -1,
			`"fastest" is not a choice: "balanced" (deep-queue IOPS without a depth-1 p99 regression), "iops" or "latency"`}},
		{func(o *Options) { o.Margin = 0.9 }, Problem{[]string{"margin"}, -1, "90% is outside 0%..50%"}},
		{func(o *Options) { o.Depths = []int{} }, Problem{[]string{"depths"}, -1, "want at least one depth, such as [1, 4, 16, 64]"}},
		{func(o *Options) { o.Depths = []int{1, 2, 3, 4, 5, 6, 7, 8, 9} }, Problem{[]string{"depths"}, -1, "9 depths: at most 8"}},
		{func(o *Options) { o.Depths = []int{1, 4, 2000} }, Problem{[]string{"depths"}, 2, "2000 is outside 1..1024"}},
		{func(o *Options) { o.Depths = []int{0, 4} }, Problem{[]string{"depths"}, 0, "0 is outside 1..1024"}},
		{func(o *Options) { o.Depths = []int{1, 16, 4} }, Problem{[]string{"depths"}, 2, "4 after 16: depths ascend, each once"}},
		{func(o *Options) { o.Depths = []int{1, 4, 4} }, Problem{[]string{"depths"}, 2, "4 after 4: depths ascend, each once"}},
		{func(o *Options) { o.Depths, o.BlockSize = []int{1, 128}, 1<<20 }, Problem{[]string{"depths", "block_size"}, -1,
			"the deepest of depths, 128 x block size 1MiB is 128MiB in flight: at most 64MiB (the probe maps a buffer that size, and psync starts a thread per depth)"}},
		{func(o *Options) { o.Margin = -0.07 }, Problem{[]string{"margin"}, -1, "-7% is outside 0%..50%"}},
		{func(o *Options) { o.NrRequests = []int{NrRequestsDefault, 2} }, Problem{[]string{"nr_requests"}, 1,
			`2 is outside 4..2048 (or "default", the kernel's value for the scheduler)`}},
		{func(o *Options) { o.NrRequests = []int{64, NrRequestsDefault, 64} }, Problem{[]string{"nr_requests"}, 2, "64 is named twice"}},
		{func(o *Options) { o.NrRequests = []int{NrRequestsDefault, NrRequestsDefault} }, Problem{[]string{"nr_requests"}, 1, "default is named twice"}},
		{func(o *Options) {
			o.Candidates, o.NrRequests = []string{"none", "mq-deadline", "kyber"}, []int{NrRequestsDefault, 16, 64}
		},
			Problem{[]string{"candidates", "nr_requests"}, -1, "3 schedulers x 3 nr_requests are 9 pairs to measure: at most 8"}},
		{func(o *Options) { o.Candidates, o.NrRequests = []string{"none"}, []int{64} }, Problem{[]string{"candidates"}, -1,
			"want at least two schedulers to compare (or one, with two nr_requests), not 1"}},
	} {
		o := Default()
		c.edit(&o)
		ps := o.Problems()
		if len(ps) != 1 || !slices.Equal(ps[0].Keys, c.want.Keys) || ps[0].Elem != c.want.Elem || ps[0].Msg != c.want.Msg {
			t.Errorf("%+v: problems %+v, want %+v", o, ps, c.want)
		}
		if err := o.Validate(); err == nil || err.Error() != "probe options: "+c.want.String() {
			t.Errorf("Validate = %v, want the problem %q", err, c.want)
		}
	}
	// A depth out of range is not also reported with the block size.
	o := Default()
	o.Depth, o.BlockSize = 5000, 1<<20
	if ps := o.Problems(); len(ps) != 1 || ps[0].Keys[0] != "depth" {
		t.Errorf("depth 5000 x 1MiB: %+v", ps)
	}
	// Nor depths out of order, whose deepest is not known.
	o = Default()
	o.Depths, o.BlockSize = []int{512, 256}, 1<<20
	if ps := o.Problems(); len(ps) != 1 || ps[0].Keys[0] != "depths" || ps[0].Elem != 1 {
		t.Errorf("depths [512, 256] x 1MiB: %+v", ps)
	}
	// One scheduler with two nr_requests is two candidates.
	o = Default()
	o.Candidates, o.NrRequests = []string{"mq-deadline"}, []int{4, NrRequestsDefault}
	if err := o.Validate(); err != nil {
		t.Errorf("mq-deadline with nr_requests 4 and default: %v", err)
	}
	for s, want := range map[string]int{"default": NrRequestsDefault, "64": 64} {
		if n, err := ParseNrRequests(s); err != nil || n != want {
			t.Errorf("ParseNrRequests(%q) = %d, %v; want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"0", "many", ""} {
		if _, err := ParseNrRequests(s); err == nil {
			t.Errorf("ParseNrRequests(%q) took it", s)
		}
	}
	// The largest limits pass.
	o = Default()
	o.Depths = []int{1, 2, 4, 8, 16, 32, 64, 1024}
	if err := o.Validate(); err != nil {
		t.Errorf("eight depths up to 1024: %v", err)
	}
}

// Zero fields are the defaults, but Margin's and Engine's zero, which are
// choices of their own.
func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := Options{Depth: 8, Margin: 0}.WithDefaults()
	want := Default()
	want.Depth, want.Margin = 8, 0
	if !slices.Equal(got.Candidates, want.Candidates) || got.Duration != want.Duration || got.Rounds != want.Rounds ||
		got.Depth != 8 || got.BlockSize != want.BlockSize || got.Engine != "" || got.Choose != want.Choose || got.Margin != 0 ||
		!slices.Equal(got.Depths, []int{1, 4, 16, 64}) {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
	// An empty list is not nil: it stays, for Problems to refuse.
	if got := (Options{Depths: []int{}}).WithDefaults(); got.Depths == nil || got.Validate() == nil {
		t.Errorf("empty depths: %+v, %v", got.Depths, got.Validate())
	}
}
