// Package diskemu emulates the disks a cloud machine has (a local NVMe
// drive, a network SSD with an IOPS cap, a burst-credit disk, an HDD-backed
// network disk, a spinning disk) behind a real loop device, so that the
// kernel's queue, scheduler, tags and stat counters in front of it are the
// real ones and only the device's service is emulated.
//
// The device is a read-only file of zeros on a FUSE file system served by
// this package. Each read waits for its share of the token buckets (an IOPS
// cap, a bandwidth cap, burst credits), then for one of the device's
// service slots (the requests it serves at once), then for a service time
// drawn from a distribution, plus a seek cost that grows with the distance
// from the previous read when the profile has one. The loop device over the
// file runs with direct I/O and the file system announces asynchronous
// direct I/O, so the loop driver hands every request to the server as it
// comes and the server sees the depth the block layer dispatches (without
// direct I/O the loop driver reads one request at a time and every profile
// would serve one read at a time).
//
// The loop driver passes on every request it holds a tag for (its queue
// depth, 128 unless the loop module says otherwise), so reads queue in the
// emulated device, in arrival order, rather than in the kernel's
// scheduler: a scheduler's order reaches the device only as the order in
// which it dispatches, and the device does not reorder (no NCQ).
//
// Profile.Model gives the IOPS a profile should deliver to a closed-loop
// reader at a given depth; the package's integration test holds the
// emulator to it with fio. Start runs an emulated disk for a test, in a
// child process built without the race detector; contrib/diskemu is the
// same disk as a command.
package diskemu

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Dist is the distribution of a read's service time.
type Dist struct {
	// Kind is "lognormal" (a right tail, as latencies have), "normal"
	// (symmetric; Spread at most Mean/3 so that clipping at zero does not
	// move the mean), or "fixed" (every read takes Mean).
	Kind   string        `json:"kind"`
	Mean   time.Duration `json:"mean"`
	Spread time.Duration `json:"spread"` // standard deviation
}

// Bucket is a token bucket: Rate tokens a second, holding at most Burst.
// A bucket starts full, so a disk can run above Rate until its Burst is
// spent (burst credits), then at Rate. A Rate of zero means no limit.
type Bucket struct {
	Rate  float64 `json:"rate"`
	Burst float64 `json:"burst"`
}

func (b Bucket) on() bool { return b.Rate > 0 }

// Seek is the cost of moving from the previous read's offset: none for a
// read that starts where the previous one ended, else Min plus (Max-Min)
// times the square root of the distance as a fraction of the disk's size
// (a concave curve, as a disk arm's: short seeks cost most per byte).
type Seek struct {
	Min time.Duration `json:"min"`
	Max time.Duration `json:"max"`
}

func (s Seek) on() bool { return s.Max > 0 }

// Profile describes an emulated disk.
type Profile struct {
	Name string `json:"name"`
	// What the profile stands for, for listings.
	About string `json:"about,omitempty"`
	// Service is the time a read spends in a service slot, seek excluded.
	Service Dist `json:"service"`
	// Parallel is how many reads the disk serves at once; the rest wait in
	// arrival order.
	Parallel int `json:"parallel"`
	// Seek, when set, adds a cost by distance from the previous read.
	Seek Seek `json:"seek"`
	// IOPS limits are taken one token a read: a peak rate (small Burst)
	// and, for a burst-credit disk, a baseline whose Burst is the credits.
	IOPS []Bucket `json:"iops,omitempty"`
	// Bytes limits take one token a byte read (a throughput cap).
	Bytes []Bucket `json:"bytes,omitempty"`
	// Overhead is service time a read takes on top of the rest while the
	// loop device in front of the disk runs the named scheduler (the
	// server follows the loop's queue/scheduler): a scheduler that makes
	// latency worse on this disk, for the adaptive guard rail's tests.
	// Model leaves it out.
	Overhead map[string]time.Duration `json:"overhead,omitempty"`
}

// Profiles are the disks a cloud machine has, one a row of the table they
// come from: latency, parallelism and limits as providers document them
// (gp3 3,000 IOPS and 125 MB/s baseline; gp2 burst to 3,000 IOPS on
// credits, 100 IOPS baseline for small volumes; st1/pd-standard a few
// hundred IOPS; a 7,200 rpm disk ~4 ms half a turn plus its seek).
var Profiles = []Profile{
	{
		Name:     "local-nvme",
		About:    "local NVMe or host-side virtio-blk: 50-100 us, 64 in service, no limits",
		Service:  Dist{Kind: "lognormal", Mean: 75 * time.Microsecond, Spread: 20 * time.Microsecond},
		Parallel: 64,
	},
	{
		Name:     "network-ssd",
		About:    "network SSD (gp3, pd-balanced): 0.3-2 ms, 32 in service, 3000 IOPS and 125 MB/s caps",
		Service:  Dist{Kind: "lognormal", Mean: time.Millisecond, Spread: 300 * time.Microsecond},
		Parallel: 32,
		IOPS:     []Bucket{{Rate: 3000, Burst: 30}},
		Bytes:    []Bucket{{Rate: 125e6, Burst: 1 << 20}},
	},
	{
		Name:     "burst",
		About:    "burst-credit disk (gp2, Standard SSD): 0.5-2 ms, 16 in service, 3000 IOPS on 6000 credits, then 300 IOPS",
		Service:  Dist{Kind: "lognormal", Mean: time.Millisecond, Spread: 300 * time.Microsecond},
		Parallel: 16,
		IOPS:     []Bucket{{Rate: 3000, Burst: 30}, {Rate: 300, Burst: 6000}},
	},
	{
		Name:     "hdd-network",
		About:    "HDD-backed network disk (pd-standard, st1/sc1): 5-20 ms, 8 in service, 500 IOPS cap",
		Service:  Dist{Kind: "lognormal", Mean: 10 * time.Millisecond, Spread: 4 * time.Millisecond},
		Parallel: 8,
		IOPS:     []Bucket{{Rate: 500, Burst: 10}},
	},
	{
		Name:     "spinning",
		About:    "spinning disk: 3.5-9.5 ms by seek distance plus rotation, 1 in service, ~150 random IOPS",
		Service:  Dist{Kind: "lognormal", Mean: 2 * time.Millisecond, Spread: 800 * time.Microsecond},
		Parallel: 1,
		Seek:     Seek{Min: 1500 * time.Microsecond, Max: 7500 * time.Microsecond},
	},
}

// Lookup returns the named profile.
func Lookup(name string) (Profile, error) {
	var names []string
	for _, p := range Profiles {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return Profile{}, fmt.Errorf("no disk profile %q (known: %s)", name, strings.Join(names, ", "))
}

// Slowed returns p with every time multiplied by k and every rate divided
// by k (burst sizes kept): the same curve over depth, k times slower. A
// machine that cannot serve a profile's rates in a user-space server (one
// FUSE round trip costs tens of microseconds of CPU) serves it slowed.
func (p Profile) Slowed(k float64) Profile {
	if k == 1 {
		return p
	}
	q := p
	q.Name = fmt.Sprintf("%s/%g", p.Name, k)
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * k) }
	q.Service.Mean, q.Service.Spread = scale(p.Service.Mean), scale(p.Service.Spread)
	q.Seek = Seek{Min: scale(p.Seek.Min), Max: scale(p.Seek.Max)}
	q.IOPS = slowBuckets(p.IOPS, k)
	q.Bytes = slowBuckets(p.Bytes, k)
	if p.Overhead != nil {
		q.Overhead = make(map[string]time.Duration, len(p.Overhead))
		for s, d := range p.Overhead {
			q.Overhead[s] = scale(d)
		}
	}
	return q
}

func slowBuckets(bs []Bucket, k float64) []Bucket {
	out := make([]Bucket, len(bs))
	for i, b := range bs {
		out[i] = Bucket{Rate: b.Rate / k, Burst: b.Burst}
	}
	return out
}

// Validate says what is wrong with p, naming the profile and the field.
func (p Profile) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("disk profile %q: %s: %s", p.Name, field, fmt.Sprintf(format, args...)))
	}
	switch p.Service.Kind {
	case "fixed", "lognormal":
	case "normal":
		if p.Service.Spread*3 > p.Service.Mean {
			bad("service.spread", "%v is more than a third of the mean %v: a normal distribution that wide is clipped at zero and its mean moves (use lognormal)", p.Service.Spread, p.Service.Mean)
		}
	default:
		bad("service.kind", "%q is not fixed, normal or lognormal", p.Service.Kind)
	}
	if p.Service.Mean < 0 || p.Service.Spread < 0 {
		bad("service", "negative time (mean %v, spread %v)", p.Service.Mean, p.Service.Spread)
	}
	if p.Service.Kind == "lognormal" && p.Service.Mean == 0 && p.Service.Spread > 0 {
		bad("service", "a lognormal with mean 0 cannot have a spread")
	}
	if p.Parallel < 1 {
		bad("parallel", "%d: a disk serves at least one read at a time", p.Parallel)
	}
	if p.Seek.Min < 0 || p.Seek.Max < p.Seek.Min {
		bad("seek", "min %v, max %v: want 0 <= min <= max", p.Seek.Min, p.Seek.Max)
	}
	for _, s := range slices.Sorted(maps.Keys(p.Overhead)) {
		if d := p.Overhead[s]; d < 0 || s == "" {
			bad("overhead", "scheduler %q: %v: want a scheduler's name and a time >= 0", s, d)
		}
	}
	for i, b := range append(append([]Bucket{}, p.IOPS...), p.Bytes...) {
		if b.Rate < 0 || b.Burst < 0 || math.IsNaN(b.Rate) || math.IsNaN(b.Burst) || math.IsInf(b.Rate, 0) || math.IsInf(b.Burst, 0) {
			bad(fmt.Sprintf("bucket %d", i+1), "rate %g, burst %g: want finite and >= 0", b.Rate, b.Burst)
		}
		if b.Rate > 0 && b.Burst < 1 {
			bad(fmt.Sprintf("bucket %d", i+1), "burst %g is less than one token: no read could ever pass", b.Burst)
		}
	}
	return errors.Join(errs...)
}
