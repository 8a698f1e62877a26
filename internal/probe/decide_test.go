package probe

import (
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/probe/probeopt"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/treetest"
)

// cand builds a candidate from per-round deep IOPS and depth-1 p99, with
// medians computed as a probe does.
func cand(name string, iops, p99 []float64) Candidate {
	c := Candidate{Scheduler: name}
	for i := range iops {
		c.Rounds = append(c.Rounds, RoundFigures{Round: i + 1, Figures: Figures{IOPS: iops[i], QD1P99: p99[i]}})
	}
	c.medians()
	return c
}

func TestDecide(t *testing.T) {
	t.Parallel()
	flat := []float64{100, 100, 100}
	tests := []struct {
		name      string
		choose    string
		margin    float64
		incumbent string
		cands     []Candidate
		winner    string
		reason    []string // substrings of the reason
	}{
		{
			name: "iops: clear win in every round", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			cands:  []Candidate{cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat), cand("none", []float64{130e3, 128e3, 131e3}, flat)},
			winner: "none", reason: []string{"none wins", "+30%", "3 of 3 rounds"},
		},
		{
			name: "iops: within the margin the incumbent stays", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			cands:  []Candidate{cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat), cand("none", []float64{104e3, 104e3, 104e3}, flat)},
			winner: "mq-deadline", reason: []string{"mq-deadline stays", "not more than 5% in the median"},
		},
		{
			name: "iops: exactly the margin is not more than it", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			cands:  []Candidate{cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat), cand("none", []float64{105e3, 105e3, 105e3}, flat)},
			winner: "mq-deadline",
		},
		{
			name: "iops: median wins but only one round of three", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			// Rounds: none wins round 2 big; the median of none is 110K
			// against 100K, but per round only round 2 beats the margin.
			cands: []Candidate{
				cand("mq-deadline", []float64{109e3, 100e3, 100e3}, flat),
				cand("none", []float64{110e3, 200e3, 104e3}, flat),
			},
			winner: "mq-deadline", reason: []string{"only 1 of 3 rounds"},
		},
		{
			name: "iops: two of three rounds is a majority", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			cands: []Candidate{
				cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat),
				cand("none", []float64{120e3, 101e3, 120e3}, flat),
			},
			winner: "none", reason: []string{"2 of 3 rounds"},
		},
		{
			name: "iops: two rounds, one won, is no majority", choose: ChooseIOPS, margin: 0.05, incumbent: "none",
			cands: []Candidate{
				cand("none", []float64{100e3, 100e3}, []float64{1, 1}),
				cand("mq-deadline", []float64{150e3, 100e3}, []float64{1, 1}),
			},
			winner: "none", reason: []string{"only 1 of 2 rounds"},
		},
		{
			name: "balanced: deep win with depth-1 regression loses", choose: ChooseBalanced, margin: 0.05, incumbent: "mq-deadline",
			cands: []Candidate{
				cand("mq-deadline", []float64{111e3, 111e3, 111e3}, []float64{50, 50, 50}),
				cand("none", []float64{143e3, 143e3, 143e3}, []float64{57, 56, 58}),
			},
			winner: "mq-deadline", reason: []string{"worse by more than 5%", "depth-1 p99 +14%"},
		},
		{
			name: "balanced: deep win with depth-1 p99 within the margin wins", choose: ChooseBalanced, margin: 0.05, incumbent: "mq-deadline",
			cands: []Candidate{
				cand("mq-deadline", []float64{111e3, 111e3, 111e3}, []float64{50, 50, 50}),
				cand("none", []float64{143e3, 143e3, 143e3}, []float64{51, 51, 52}),
			},
			winner: "none", reason: []string{"none wins", "+29%", "depth-1 p99 +2%", "within 5%"},
		},
		{
			name: "latency: lower p99 in the median and the rounds", choose: ChooseLatency, margin: 0.05, incumbent: "none",
			cands: []Candidate{
				cand("none", flat, []float64{100, 100, 100}),
				cand("mq-deadline", flat, []float64{80, 90, 85}),
			},
			winner: "mq-deadline", reason: []string{"mq-deadline wins", "depth-1 p99 -15%", "3 of 3 rounds"},
		},
		{
			name: "latency: IOPS gains do not count", choose: ChooseLatency, margin: 0.05, incumbent: "none",
			cands: []Candidate{
				cand("none", []float64{100e3, 100e3, 100e3}, []float64{100, 100, 100}),
				cand("mq-deadline", []float64{300e3, 300e3, 300e3}, []float64{99, 99, 99}),
			},
			winner: "none",
		},
		{
			name: "three candidates: the best winner wins", choose: ChooseIOPS, margin: 0.05, incumbent: "mq-deadline",
			cands: []Candidate{
				cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat),
				cand("kyber", []float64{120e3, 120e3, 120e3}, flat),
				cand("none", []float64{150e3, 150e3, 150e3}, flat),
			},
			winner: "none",
		},
		{
			name: "zero margin: any gain in the median and a majority", choose: ChooseIOPS, margin: 0, incumbent: "mq-deadline",
			cands: []Candidate{
				cand("mq-deadline", []float64{100e3, 100e3, 100e3}, flat),
				cand("none", []float64{100.5e3, 101e3, 99e3}, flat),
			},
			winner: "none",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.choose, tc.margin, tc.incumbent, tc.cands)
			if d.Winner != tc.winner {
				t.Fatalf("winner %s, want %s (%s)", d.Winner, tc.winner, d.Reason)
			}
			for _, s := range tc.reason {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("reason %q lacks %q", d.Reason, s)
				}
			}
			if !strings.HasPrefix(d.Provenance, "probe: ") {
				t.Errorf("provenance %q", d.Provenance)
			}
		})
	}
}

func TestProvenance(t *testing.T) {
	t.Parallel()
	d := Decide(ChooseBalanced, 0.05, "mq-deadline", []Candidate{
		cand("mq-deadline", []float64{111e3, 111e3, 111e3}, []float64{50, 50, 50}),
		cand("none", []float64{143e3, 143e3, 143e3}, []float64{51, 51, 51}),
	})
	if want := "probe: none 143K IOPS vs mq-deadline 111K (+29%), depth-1 p99 +2%"; d.Provenance != want {
		t.Errorf("provenance %q, want %q", d.Provenance, want)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	t.Parallel()
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	lat := make([]uint32, 1000)
	for i := range lat {
		lat[i] = uint32(i+1) * 1000 // 1..1000 µs
	}
	if p := percentileUs(lat, 0.99); p != 990 {
		t.Errorf("p99 = %v", p)
	}
	if p := percentileUs(lat, 0.999); p != 999 {
		t.Errorf("p99.9 = %v", p)
	}
	if p := percentileUs(lat, 0.5); p != 500 {
		t.Errorf("p50 = %v", p)
	}
}

// A disk on kyber probed with candidates none and mq-deadline: none, the
// first candidate, is the incumbent a challenger must beat, but the disk
// never ran it, so when mq-deadline does not beat it the text must not say
// "none stays" (kyber is what the probe put back): it says none is chosen
// as the first candidate. With none on the disk it stays.
func TestDecideIncumbentNotOnTheDisk(t *testing.T) {
	t.Parallel()
	flat := []float64{100, 100, 100}
	cands := []Candidate{cand("none", []float64{100e3, 100e3, 100e3}, flat), cand("mq-deadline", []float64{101e3, 99e3, 100e3}, flat)}
	d := DecideFor(ChooseBalanced, 0.05, "none", false, cands)
	if d.Winner != "none" || strings.Contains(d.Reason, "stays") || strings.Contains(d.Provenance, "kept") ||
		!strings.Contains(d.Reason, "none is chosen as the first candidate") || !strings.Contains(d.Provenance, "none as the first candidate") {
		t.Errorf("off the disk: %+v", d)
	}
	if d := DecideFor(ChooseBalanced, 0.05, "none", true, cands); !strings.Contains(d.Reason, "none stays") || !strings.Contains(d.Provenance, "none kept") {
		t.Errorf("on the disk: %+v", d)
	}
}

// TestDecidePairs: candidates that differ by nr_requests are told apart by
// name; the decision carries the winner's nr_requests as the disk took it,
// and "no difference" keeps the incumbent's.
func TestDecidePairs(t *testing.T) {
	t.Parallel()
	pair := func(sched string, nr, set int, iops ...float64) Candidate {
		c := Candidate{Scheduler: sched, NrRequests: nr, NrRequestsSet: set}
		for i, v := range iops {
			c.Rounds = append(c.Rounds, RoundFigures{Round: i + 1, Figures: Figures{IOPS: v, QD1P99: 100}})
		}
		c.medians()
		return c
	}
	cands := []Candidate{
		pair("mq-deadline", 4, 4, 1000, 1010, 990),
		pair("mq-deadline", probeopt.NrRequestsDefault, 256, 3900, 4000, 4100),
		pair("none", 4, 4, 1000, 1000, 1000),
		pair("none", 512, 128, 3000, 3000, 3000),
	}
	noise := setSpreads(ChooseIOPS, cands)
	d := withinNoise(DecideFor(ChooseIOPS, 0.05, "mq-deadline nr_requests 4", true, cands), ChooseIOPS, 0.05, noise, "mq-deadline nr_requests 4", true, cands)
	if d.Winner != "mq-deadline" || d.WinnerNr != 256 || d.NoDifference || !strings.HasPrefix(d.Reason, "mq-deadline nr_requests default wins: ") {
		t.Errorf("decision %+v, want mq-deadline with its default 256", d)
	}
	if !cands[1].Won(d) || cands[0].Won(d) || cands[1].Label() != "mq-deadline nr_requests default (256)" || cands[3].Label() != "none nr_requests 512 (128)" {
		t.Errorf("won %v %v, labels %q %q", cands[1].Won(d), cands[0].Won(d), cands[1].Label(), cands[3].Label())
	}
	same := []Candidate{pair("none", 4, 4, 1000, 1010, 990), pair("none", 64, 64, 1005, 1000, 995)}
	noise = setSpreads(ChooseIOPS, same)
	d = withinNoise(DecideFor(ChooseIOPS, 0.05, "none nr_requests 64", true, same), ChooseIOPS, 0.05, noise, "none nr_requests 64", true, same)
	if !d.NoDifference || d.Winner != "none" || d.WinnerNr != 64 {
		t.Errorf("decision %+v, want no difference and the incumbent's nr_requests 64 kept", d)
	}
}

// TestIncumbentOf: the disk's scheduler with its nr_requests when both
// are candidates ("default" when the value is the kernel's for it), else
// the first candidate, not on the disk.
func TestIncumbentOf(t *testing.T) {
	t.Parallel()
	nrs := []int{probeopt.NrRequestsDefault, 64}
	for _, c := range []struct {
		sched  string
		nr     int
		want   string
		onDisk bool
	}{
		{"mq-deadline", 64, "mq-deadline nr_requests 64", true},
		{"mq-deadline", 256, "mq-deadline nr_requests default", true},
		{"none", 128, "none nr_requests default", true},
		{"mq-deadline", 6, "mq-deadline nr_requests default", false},
		{"bfq", 64, "none nr_requests default", false},
	} {
		got, on := incumbentOf([]string{"none", "mq-deadline"}, nrs, c.sched, c.nr, 128)
		if got != c.want || on != c.onDisk {
			t.Errorf("%s with %d: %q on disk %v, want %q %v", c.sched, c.nr, got, on, c.want, c.onDisk)
		}
	}
	if got, on := incumbentOf([]string{"none", "mq-deadline"}, nil, "mq-deadline", 6, 128); got != "mq-deadline" || !on {
		t.Errorf("without nr_requests: %q %v", got, on)
	}
}

// TestForceNr: under none the value a disk shows is not always the depth
// of its tags in use, and the kernel ignores a write of the value shown:
// forceNr writes another value first then, and only then.
func TestForceNr(t *testing.T) {
	t.Parallel()
	root := treetest.Copy(t, "../../testdata/sysfs/cloud")
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	shown, err := readNr(fs, "vda")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		n    int
		want []int
	}{
		{shown, []int{shown - 1, shown}},
		{shown / 2, []int{shown / 2}},
	} {
		var wrote []int
		got, err := forceNr(fs, "vda", c.n, func(n int) (int, error) { wrote = append(wrote, n); return n, nil })
		if err != nil || got != c.n || !slices.Equal(wrote, c.want) {
			t.Errorf("forceNr(%d) with %d shown: %d, %v, wrote %v; want %v", c.n, shown, got, err, wrote, c.want)
		}
	}
	if err := fs.WriteQueueAttr("vda", "nr_requests", "4"); err != nil {
		t.Fatal(err)
	}
	var wrote []int
	if _, err := forceNr(fs, "vda", 4, func(n int) (int, error) { wrote = append(wrote, n); return n, nil }); err != nil || !slices.Equal(wrote, []int{5, 4}) {
		t.Errorf("forceNr(4) with 4 shown: %v, wrote %v; want 5 then 4 (nothing below the kernel's floor)", err, wrote)
	}
}
