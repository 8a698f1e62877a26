package diskemu

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mustLookup(t *testing.T, name string) Profile {
	t.Helper()
	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// TestModel checks the model against figures worked out by hand from each
// profile's numbers.
func TestModel(t *testing.T) {
	t.Parallel()
	burst := mustLookup(t, "burst")
	for _, c := range []struct {
		what  string
		p     Profile
		depth int
		bs    int
		over  time.Duration
		path  time.Duration
		want  float64
	}{
		// 1 ms a read, one at a time.
		{"network-ssd, depth 1", mustLookup(t, "network-ssd"), 1, 4096, 0, 0, 1000},
		// 4 reads of 1 ms would be 4,000 a second: the 3,000 IOPS cap.
		{"network-ssd, depth 4", mustLookup(t, "network-ssd"), 4, 4096, 0, 0, 3000},
		// 128 KiB reads meet the 125 MB/s cap first.
		{"network-ssd, 128 KiB", mustLookup(t, "network-ssd"), 64, 128 << 10, 0, 0, 125e6 / (128 << 10)},
		// The reader's own path doubles a 1 ms read.
		{"network-ssd, 1 ms outside", mustLookup(t, "network-ssd"), 1, 4096, 0, time.Millisecond, 500},
		// 64 slots of 75 us; a deeper reader gains nothing.
		{"local-nvme, depth 64", mustLookup(t, "local-nvme"), 64, 4096, 0, 0, 64 / 75e-6},
		{"local-nvme, depth 256", mustLookup(t, "local-nvme"), 256, 4096, 0, 0, 64 / 75e-6},
		// One slot: 2 ms + a seek of 1.5 ms + 6 ms x 8/15 = 6.7 ms.
		{"spinning, depth 64", mustLookup(t, "spinning"), 64, 4096, 0, 0, 1 / 6.7e-3},
		// Over 3 s at depth 4 (3,000 IOPS at most), the 6,000 credits
		// run out at 2.2 s: 6,000 + 300 x 3 reads pass by 3 s, then the 4
		// in flight drain at 300 a second.
		{"burst, 3 s at depth 4", burst, 4, 4096, 3 * time.Second, 0, (6900 + 4) / (3 + 4.0/300)},
		// At depth 1 (1,000 IOPS) the credits last 8.6 s: no baseline in
		// a 3 s run, and the drain of one read is one read's time.
		{"burst, 3 s at depth 1", burst, 1, 4096, 3 * time.Second, 0, 1000},
		// Long enough that the credits do not count: the baseline.
		{"burst, steady", burst, 16, 4096, 0, 0, 300},
	} {
		if got := c.p.Model(c.depth, c.bs, c.over, c.path); !near(got, c.want, 1e-9) {
			t.Errorf("%s: model %.3f IOPS, want %.3f", c.what, got, c.want)
		}
	}
}

// TestModelDrainOfAFreeDisk: on a disk no bucket limits, waiting for the
// reads in flight at the end of a run lasts one read, during which the
// rate is the same: a run of any length gives the steady rate.
func TestModelDrainOfAFreeDisk(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"local-nvme", "spinning"} {
		p := mustLookup(t, name)
		for _, d := range []int{1, 4, 16, 64} {
			steady := p.Model(d, 4096, 0, 50*time.Microsecond)
			if got := p.Model(d, 4096, 2*time.Second, 50*time.Microsecond); !near(got, steady, 1e-9) {
				t.Errorf("%s depth %d: %.3f over 2 s, %.3f steady", name, d, got, steady)
			}
		}
	}
}

// TestCreditsLast: the burst disk at depth 4 takes 3,000 a second against a
// refill of 300: 6,000 credits last 6000/2700 s.
func TestCreditsLast(t *testing.T) {
	t.Parallel()
	p := mustLookup(t, "burst")
	if got, want := p.CreditsLast(4, 0), 6000.0/2700; !near(got.Seconds(), want, 1e-9) {
		t.Errorf("credits last %v at depth 4, want %.4fs", got, want)
	}
	if got := mustLookup(t, "local-nvme").CreditsLast(64, 0); got != 0 {
		t.Errorf("a disk without buckets: credits last %v, want 0", got)
	}
}

// TestSlowed: k times slower is the same curve over depth, every rate
// divided by k, bursts kept.
func TestSlowed(t *testing.T) {
	t.Parallel()
	for _, p := range Profiles {
		q := p.Slowed(4)
		if err := q.Validate(); err != nil {
			t.Fatal(err)
		}
		if q.Service.Mean != 4*p.Service.Mean || q.Service.Spread != 4*p.Service.Spread || q.Seek.Max != 4*p.Seek.Max {
			t.Errorf("%s slowed 4: service %+v seek %+v from %+v %+v", p.Name, q.Service, q.Seek, p.Service, p.Seek)
		}
		for i := range p.IOPS {
			if q.IOPS[i].Rate != p.IOPS[i].Rate/4 || q.IOPS[i].Burst != p.IOPS[i].Burst {
				t.Errorf("%s slowed 4: bucket %+v from %+v", p.Name, q.IOPS[i], p.IOPS[i])
			}
		}
		for _, d := range []int{1, 4, 16, 64} {
			if got, want := q.Model(d, 4096, 0, 0), p.Model(d, 4096, 0, 0)/4; !near(got, want, 1e-9) {
				t.Errorf("%s slowed 4 at depth %d: %.3f IOPS, want %.3f", p.Name, d, got, want)
			}
		}
		if len(p.IOPS) > 0 && &q.IOPS[0] == &p.IOPS[0] {
			t.Errorf("%s: the slowed profile shares its buckets with the original", p.Name)
		}
	}
}

// TestBucket: a full bucket passes its burst at once, then one read every
// 1/Rate, in order; idle time refills it up to Burst and no further.
func TestBucket(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	b := bucket{Bucket: Bucket{Rate: 10, Burst: 3}, tokens: 3, at: t0}
	for i, want := range []time.Duration{0, 0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
		if got := b.take(t0, 1).Sub(t0); got != want {
			t.Errorf("read %d goes at +%v, want +%v", i+1, got, want)
		}
	}
	// The debt (3 reads) is repaid at +300 ms; ten seconds later the
	// bucket holds its burst, not 97 tokens.
	t1 := t0.Add(10 * time.Second)
	for i, want := range []time.Duration{0, 0, 0, 100 * time.Millisecond} {
		if got := b.take(t1, 1).Sub(t1); got != want {
			t.Errorf("after idling, read %d goes at +%v, want +%v", i+1, got, want)
		}
	}
}

// TestDraw: the service times drawn have the profile's mean and spread.
func TestDraw(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"lognormal", "normal", "fixed"} {
		p := Profile{Name: kind, Service: Dist{Kind: kind, Mean: 3 * time.Millisecond, Spread: time.Millisecond}, Parallel: 1}
		if kind == "fixed" {
			p.Service.Spread = 0
		}
		d, err := New(p, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		const n = 200000
		var sum, sq float64
		for range n {
			v := d.draw().Seconds()
			sum += v
			sq += v * v
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		if !near(mean, p.Service.Mean.Seconds(), 0.01) || math.Abs(sd-p.Service.Spread.Seconds()) > 0.02*p.Service.Mean.Seconds() {
			t.Errorf("%s: mean %.4f ms, sd %.4f ms; want %v, %v", kind, mean*1e3, sd*1e3, p.Service.Mean, p.Service.Spread)
		}
	}
}

// TestSeek: the cost by distance, and its mean between random offsets is
// the one the model uses.
func TestSeek(t *testing.T) {
	t.Parallel()
	p := mustLookup(t, "spinning")
	const size = 1 << 30
	d, err := New(p, size)
	if err != nil {
		t.Fatal(err)
	}
	d.head = size / 2
	if got := d.seek(size / 2); got != 0 {
		t.Errorf("reading on where the last read ended costs %v, want 0", got)
	}
	if got, want := d.seek(size/2+size/4), p.Seek.Min+(p.Seek.Max-p.Seek.Min)/2; got != want {
		t.Errorf("a quarter of the disk away costs %v, want %v", got, want)
	}
	d.head = 0
	if got := d.seek(size); got != p.Seek.Max {
		t.Errorf("the whole disk away costs %v, want %v", got, p.Seek.Max)
	}
	var sum time.Duration
	const n = 200000
	for range n {
		off := d.rng.Int64N(size)
		sum += d.seek(off)
		d.head = off
	}
	want := p.MeanService() - p.Service.Mean
	if got := sum / n; !near(float64(got), float64(want), 0.01) {
		t.Errorf("mean seek between random reads %v, the model uses %v", got, want)
	}
}

// TestValidate: every named profile is valid; a bad one is refused with
// its name and the field at fault.
func TestValidate(t *testing.T) {
	t.Parallel()
	for _, p := range Profiles {
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct {
		p    Profile
		want string
	}{
		{Profile{Name: "x", Service: Dist{Kind: "gamma"}, Parallel: 1}, `disk profile "x": service.kind: "gamma"`},
		{Profile{Name: "x", Service: Dist{Kind: "normal", Mean: time.Millisecond, Spread: time.Millisecond}, Parallel: 1}, "service.spread"},
		{Profile{Name: "x", Service: Dist{Kind: "fixed"}}, "parallel: 0"},
		{Profile{Name: "x", Service: Dist{Kind: "fixed"}, Parallel: 1, Seek: Seek{Min: 2, Max: 1}}, "seek"},
		{Profile{Name: "x", Service: Dist{Kind: "fixed"}, Parallel: 1, IOPS: []Bucket{{Rate: 10, Burst: 0.5}}}, "bucket 1: burst 0.5"},
		{Profile{Name: "x", Service: Dist{Kind: "fixed"}, Parallel: 1, Bytes: []Bucket{{Rate: math.Inf(1), Burst: 1}}}, "bucket 1: rate +Inf"},
		{Profile{Name: "x", Service: Dist{Kind: "fixed"}, Parallel: 1, Overhead: map[string]time.Duration{"none": -1}}, `overhead: scheduler "none": -1ns`},
	} {
		err := c.p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one with %q", c.p, err, c.want)
		}
		if _, err := New(c.p, 1<<20); err == nil {
			t.Errorf("New accepted %+v", c.p)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	if p, err := Lookup("spinning"); err != nil || p.Parallel != 1 {
		t.Errorf("Lookup(spinning) = %+v, %v", p, err)
	}
	_, err := Lookup("tape")
	if err == nil || !strings.Contains(err.Error(), `"tape"`) || !strings.Contains(err.Error(), "burst, hdd-network, local-nvme, network-ssd, spinning") {
		t.Errorf("Lookup(tape): %v", err)
	}
}

func TestParseStats(t *testing.T) {
	t.Parallel()
	st, err := parseStats("reads=12 inside_ns=3000 peak_in_service=4")
	if err != nil || st != (Stats{Reads: 12, Inside: 3 * time.Microsecond, PeakInService: 4}) {
		t.Errorf("parseStats: %+v, %v", st, err)
	}
	if _, err := parseStats("reads=x"); err == nil {
		t.Error("parseStats accepted a bad line")
	}
}

// TestModuleRoot: the fixture finds iosched's go.mod from a package's
// directory, where the tool it builds lives.
func TestModuleRoot(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "contrib", "diskemu", "main.go")); err != nil {
		t.Errorf("module root %s: %v", root, err)
	}
}
