package fleet

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/promtest"
)

const (
	keyA = "virtio/virtio_blk/-/hwq1/qd256/10737418240B/6.18.0" // one queue: the kernel gives mq-deadline
	keyB = "nvme/nvme/Fast SSD/hwq4/qd1023/960197124096B/6.18.0"
	keyC = "scsi/sd/QEMU HARDDISK/hwq1/qd128/1073741824B/6.18.0"
)

var end = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// curve is a none/mq-deadline curve at depths 1, 4, 16, 64.
func curve(none, mq [4]float64) map[string]map[int]float64 {
	c := map[string]map[int]float64{"none": {}, "mq-deadline": {}}
	for i, d := range []int{1, 4, 16, 64} {
		c["none"][d], c["mq-deadline"][d] = none[i], mq[i]
	}
	return c
}

// smallFleet: key A on three machines (one with two disks, one with a
// seeded copy that must not count), key B with busy time but no curves,
// key C on one machine.
func smallFleet() []promtest.Machine {
	return []promtest.Machine{
		{Instance: "m1:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Source: "probed",
				Busy:   map[int]float64{0: 0.5, 2: 1.0 / 6}, // 1800 s at depth 1, 600 s at (2,4] over the hour
				Curves: curve([4]float64{100, 400, 1000, 1200}, [4]float64{110, 380, 900, 1000})},
			{Name: "vdc", Key: keyA, Source: "seeded",
				Curves: curve([4]float64{1e6, 1e6, 1e6, 1e6}, [4]float64{1, 1, 1, 1})},
			{Name: "sda", Key: keyC, Source: "probed", Busy: map[int]float64{0: 0.1},
				Curves: curve([4]float64{100, 100, 100, 100}, [4]float64{120, 120, 120, 120})},
		}},
		{Instance: "m2:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Source: "remembered",
				Busy:   map[int]float64{0: 1.0 / 6, 5: 1.0 / 3}, // 600 s at 1, 1200 s at (16,32]
				Curves: curve([4]float64{90, 420, 1100, 1300}, [4]float64{100, 400, 1000, 1100})},
			{Name: "nvme0n1", Key: keyB, Busy: map[int]float64{3: 0.25}},
		}},
		{Instance: "m3:9100", Disks: []promtest.Disk{
			{Name: "vda", Key: keyA, Source: "probed", Busy: map[int]float64{2: 1.0 / 6},
				Curves: curve([4]float64{80, 300, 900, 1000}, [4]float64{100, 300, 1000, 1200})},
			{Name: "vdb", Key: keyA, Source: "probed", Busy: map[int]float64{2: 1.0 / 6},
				Curves: curve([4]float64{100, 340, 1100, 1400}, [4]float64{100, 320, 1000, 1200})},
			{Name: "nvme0n1", Key: keyB, Busy: map[int]float64{3: 0.25}},
		}},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func keyOf(t *testing.T, rep *Report, key string) Key {
	t.Helper()
	for _, k := range rep.Keys {
		if k.Key == key {
			return k
		}
	}
	t.Fatalf("no key %s in the report: %+v", key, rep.Keys)
	return Key{}
}

// The small fleet's table, computed here by hand from the series loaded.
func TestQuerySmallFleet(t *testing.T) {
	t.Parallel()
	srv := promtest.StartServer(t, promtest.ServerOptions{OpenMetrics: promtest.OpenMetrics(smallFleet(), end, 2*time.Hour, time.Minute)})
	rep, err := Query(context.Background(), srv.API, Options{Range: time.Hour, At: end, MinMachines: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rep.Keys); got != 3 {
		t.Fatalf("%d keys, want 3: %+v", got, rep.Keys)
	}

	a := keyOf(t, rep, keyA)
	if a.Machines != 3 || a.Disks != 5 {
		t.Errorf("key A: %d machines, %d disks; want 3, 5", a.Machines, a.Disks)
	}
	if a.Kernel != "mq-deadline" {
		t.Errorf("key A: kernel %q, want mq-deadline", a.Kernel)
	}
	// Busy seconds over the hour: depth 1: 1800+600, (2,4]: 600+600+600,
	// (16,32]: 1200; 5400 in all.
	if !near(a.BusyHours, 1.5) {
		t.Errorf("key A: %g busy hours, want 1.5", a.BusyHours)
	}
	wantShare := map[float64]float64{1: 2400.0 / 5400, 4: 1800.0 / 5400, 32: 1200.0 / 5400}
	if len(a.Depths) != 10 {
		t.Fatalf("key A: %d depth buckets, want 10: %+v", len(a.Depths), a.Depths)
	}
	for i, d := range a.Depths {
		if i < len(promtest.BusyBounds) && d.Le != promtest.BusyBounds[i] || i == len(promtest.BusyBounds) && !math.IsInf(d.Le, 1) {
			t.Errorf("key A: bucket %d has le %g", i, d.Le)
		}
		if !near(d.Share, wantShare[d.Le]) {
			t.Errorf("key A: share at le %g is %g, want %g", d.Le, d.Share, wantShare[d.Le])
		}
	}
	// Curves: each machine's the median of its disks (m3: the mean of
	// vda's and vdb's), then the median over machines; the seeded copy
	// on m1 is left out.
	machines := map[string][3][4]float64{ // none, mq-deadline by depth index; m3 averaged
		"none":        {{100, 400, 1000, 1200}, {90, 420, 1100, 1300}, {90, 320, 1000, 1200}},
		"mq-deadline": {{110, 380, 900, 1000}, {100, 400, 1000, 1100}, {100, 310, 1000, 1200}},
	}
	med3 := func(x, y, z float64) float64 { v := []float64{x, y, z}; slices.Sort(v); return v[1] }
	if len(a.Curves) != 2 {
		t.Fatalf("key A: curves %+v, want none and mq-deadline", a.Curves)
	}
	medians := map[string][4]float64{}
	for _, c := range a.Curves {
		m := machines[c.Scheduler]
		if len(c.Points) != 4 {
			t.Fatalf("key A: %s has %d points, want 4", c.Scheduler, len(c.Points))
		}
		var md [4]float64
		for i, p := range c.Points {
			want := med3(m[0][i], m[1][i], m[2][i])
			md[i] = want
			lo := min(m[0][i], m[1][i], m[2][i])
			hi := max(m[0][i], m[1][i], m[2][i])
			if p.Depth != []int{1, 4, 16, 64}[i] || !near(p.Median, want) || !near(p.Min, lo) || !near(p.Max, hi) || p.Machines != 3 {
				t.Errorf("key A: %s point %d = %+v, want depth %d median %g min %g max %g over 3", c.Scheduler, i, p, []int{1, 4, 16, 64}[i], want, lo, hi)
			}
		}
		medians[c.Scheduler] = md
	}
	// The verdict: none against mq-deadline at each bucket's depth: 1;
	// sqrt(2*4), three quarters of the way from 1 to 4 in log(depth);
	// sqrt(16*32), a quarter of the way from 16 to 64; weighted 24:18:12.
	change := func(none, mq [4]float64) float64 {
		lerp := func(c [4]float64, i int, f float64) float64 { return c[i] + f*(c[i+1]-c[i]) }
		r1 := none[0]/mq[0] - 1
		r4 := lerp(none, 0, 0.75)/lerp(mq, 0, 0.75) - 1
		r32 := lerp(none, 2, 0.25)/lerp(mq, 2, 0.25) - 1
		return (2400*r1 + 1800*r4 + 1200*r32) / 5400
	}
	want := change(medians["none"], medians["mq-deadline"])
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range 3 {
		c := change(machines["none"][i], machines["mq-deadline"][i])
		lo, hi = min(lo, c), max(hi, c)
	}
	if len(a.Verdicts) != 1 {
		t.Fatalf("key A: verdicts %+v, want one for none (note %q)", a.Verdicts, a.Note)
	}
	v := a.Verdicts[0]
	if v.Scheduler != "none" || !near(v.Change, want) || !near(v.Low, lo) || !near(v.High, hi) || v.Machines != 3 {
		t.Errorf("key A: verdict %+v, want none %g (range %g..%g over 3)", v, want, lo, hi)
	}
	if a.Note != "" {
		t.Errorf("key A: note %q", a.Note)
	}

	b := keyOf(t, rep, keyB)
	if b.Machines != 2 || b.Disks != 2 || !near(b.BusyHours, 0.5) || len(b.Curves) != 0 || len(b.Verdicts) != 0 {
		t.Errorf("key B: %+v, want 2 machines, 2 disks, 0.5 busy hours, no curves, no verdict", b)
	}
	if b.Kernel != "none" || !strings.Contains(b.Note, "no probe data") {
		t.Errorf("key B: kernel %q, note %q; want none and \"no probe data\"", b.Kernel, b.Note)
	}

	c := keyOf(t, rep, keyC)
	if c.Machines != 1 || len(c.Curves) != 2 || len(c.Verdicts) != 0 || !strings.Contains(c.Note, "only 1 machine, fewer than the 2") {
		t.Errorf("key C: %+v, want 1 machine, its curves, no verdict, a note of too few machines", c)
	}
}

// Match narrows the disks to those of its matchers, and a match of every
// disk answers as no match does (the one joins, the other sums the
// series' own keys); a malformed one is refused before any query.
func TestQueryMatch(t *testing.T) {
	t.Parallel()
	srv := promtest.StartServer(t, promtest.ServerOptions{OpenMetrics: promtest.OpenMetrics(smallFleet(), end, 2*time.Hour, time.Minute)})
	all, err := Query(context.Background(), srv.API, Options{Range: time.Hour, At: end, MinMachines: 2})
	if err != nil {
		t.Fatal(err)
	}
	every, err := Query(context.Background(), srv.API, Options{Match: `{job="node"}`, Range: time.Hour, At: end, MinMachines: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(all, every) {
		t.Errorf("a match of every disk:\n%+v\nno match:\n%+v", every, all)
	}
	rep, err := Query(context.Background(), srv.API, Options{Match: `{class="nvme"}`, Range: time.Hour, At: end, MinMachines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Keys) != 1 || rep.Keys[0].Key != keyB {
		t.Errorf("keys %+v, want only %s", rep.Keys, keyB)
	}
	if _, err := Query(context.Background(), srv.API, Options{Match: `class="nvme"`, Range: time.Hour, MinMachines: 1}); err == nil || !strings.Contains(err.Error(), "braces") {
		t.Errorf("a match without braces: %v", err)
	}
	if _, err := Query(context.Background(), srv.API, Options{Match: `{class=~"("}`, Range: time.Hour, MinMachines: 1}); err == nil {
		t.Error("a match Prometheus cannot parse: no error")
	}
}

// A disk whose key changed within the window (a kernel upgrade: the key
// names the kernel) counts under each key it had, with the busy time it
// had under each, with a match or without.
func TestQueryKeyChangedInWindow(t *testing.T) {
	t.Parallel()
	oldKey := "virtio/virtio_blk/-/hwq1/qd256/10737418240B/6.17.0"
	keyAt := func(i int) string {
		if i > 30 {
			return keyA
		}
		return oldKey
	}
	var b strings.Builder
	for i := 0; i <= 60; i++ {
		ts := end.Add(time.Duration(i-60) * time.Minute).Unix()
		fmt.Fprintf(&b, "iosched_disk_info{instance=\"m1:9100\",job=\"node\",disk=\"vda\",key=%q,class=\"virtio\"} 1 %d\n", keyAt(i), ts)
	}
	for _, le := range []string{"1", "+Inf"} {
		for i := 0; i <= 60; i++ {
			ts := end.Add(time.Duration(i-60) * time.Minute).Unix()
			fmt.Fprintf(&b, "iosched_disk_busy_depth_seconds_bucket{instance=\"m1:9100\",job=\"node\",disk=\"vda\",key=%q,le=%q} %d %d\n", keyAt(i), le, 30*i, ts)
		}
	}
	b.WriteString("# EOF\n")
	srv := promtest.StartServer(t, promtest.ServerOptions{OpenMetrics: []byte(b.String())})
	for _, match := range []string{"", `{class="virtio"}`} {
		rep, err := Query(context.Background(), srv.API, Options{Match: match, Range: time.Hour, At: end, MinMachines: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Half a second of busy time a second, for half an hour under
		// each key: a quarter of an hour each, give or take the 30 s a
		// series' increase is extrapolated by at its open end.
		if len(rep.Keys) != 2 {
			t.Fatalf("match %q: report %+v, want the disk under both its keys", match, rep.Keys)
		}
		for _, k := range rep.Keys {
			if k.Machines != 1 || k.Disks != 1 || math.Abs(k.BusyHours-0.25) > 31.0/3600 {
				t.Errorf("match %q: key %s: %d machines, %d disks, %g busy hours; want 1, 1, 0.25 within 30 s", match, k.Key, k.Machines, k.Disks, k.BusyHours)
			}
		}
	}
}
