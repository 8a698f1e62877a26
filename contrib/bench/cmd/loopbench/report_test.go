package main

import (
	"math"
	"strings"
	"testing"
)

// Ratios are taken within each round, and the targets judged on their
// medians; the peak is the highest of every run of the build judged.
func TestSummarize(t *testing.T) {
	t.Parallel()
	m := metrics{"reps": 3, "cpus": 2, "loops": 1000,
		"hwm_kib": 17000, "rss_kib": 14000, "rescan_best_s": 0.02, "rescan_median_s": 0.03, "rescan_writes": 0,
		"idle.quiet_ticks": 0, "idle.quiet_seconds": 10}
	round := func(r int, k string, v float64) { m[roundKey(r, k)] = v }
	for r, f := range []struct{ create, rawhp, rawhpConv, raw, rawCPU, dhp, dhpConv, dburst, dCPU, hwm float64 }{
		{0.20, 0.40, 0.41, 0.20, 0.25, 0.42, 0.44, 0.24, 0.30, 17500},
		{0.25, 0.50, 0.51, 0.30, 0.30, 0.60, 0.62, 0.33, 0.45, 18000},
		{0.22, 0.44, 0.45, 0.25, 0.20, 0.44, 0.46, 0.40, 0.30, 18500},
	} {
		r++
		round(r, "create.create_s", f.create)
		round(r, "rawhotplug.create_s", f.rawhp)
		round(r, "rawhotplug.converge_s", f.rawhpConv)
		round(r, "raw.write_s", f.raw)
		round(r, "raw.write_cpu_s", f.rawCPU)
		round(r, "iosched_hotplug.create_s", f.dhp)
		round(r, "iosched_hotplug.converge_s", f.dhpConv)
		round(r, "iosched_burst.converge_s", f.dburst)
		round(r, "iosched_burst_cpu_s", f.dCPU)
		round(r, "iosched_hwm_kib", f.hwm)
	}
	s := summarize(m, map[string]string{"daemons": "iosched"})
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// Each round's own ratio: 1.05, 1.2, 1.0 -> median 1.05; the ratio of
	// the medians (0.44/0.44 = 1.0) is not it.
	if r := s.Ratios["iosched: hotplug_create/rawhotplug_create"]; !near(r, 1.05) {
		t.Errorf("hot-plug creation ratio %v, want 1.05", r)
	}
	if got := s.RoundRatios["iosched: burst_converge/raw_write"]; len(got) != 3 || !near(got[0], 1.2) || !near(got[1], 1.1) || !near(got[2], 1.6) {
		t.Errorf("burst round ratios %v", got)
	}
	want := map[string]string{
		"hot-plugged: creation with the daemon / with the raw writer": "pass", // 1.05
		"hot-plugged: converged, daemon / raw writer":                 "pass", // 1.07, 1.22, 1.02 -> 1.07
		"1000 at once: converged, daemon / raw parallel write":        "pass", // 1.2, 1.1, 1.6 -> 1.2
		"1000 at once: CPU, daemon / raw parallel writer":             "FAIL", // 1.2, 1.5, 1.5 -> 1.5
		"VmHWM KiB, peak of every run (1000 disks)":                   "FAIL", // 18500 in round 3
		"VmRSS KiB, 1000 managed":                                     "pass",
		"rescan of 1000 in policy: writes":                            "pass",
		"idle CPU ticks in 10 quiet seconds":                          "pass",
	}
	seen := map[string]bool{}
	for _, tg := range s.Targets {
		seen[tg.What] = true
		if w, ok := want[tg.What]; ok && tg.Result != w {
			t.Errorf("%s: %v %s, want %s", tg.What, tg.Value, tg.Result, w)
		}
	}
	for w := range want {
		if !seen[w] {
			t.Errorf("target %q not judged", w)
		}
	}
	if v := s.Medians["iosched_burst.peak_kib"]; v != 18500 {
		t.Errorf("peak %v, want the highest round's, 18500", v)
	}
}

// A round that lacks a figure is left out of its ratios; with none, the
// target is not judged at all.
func TestSummarizeMissing(t *testing.T) {
	t.Parallel()
	m := metrics{"reps": 2}
	m[roundKey(1, "raw.write_s")] = 0.2
	m[roundKey(1, "iosched_burst.converge_s")] = 0.25
	m[roundKey(2, "iosched_burst.converge_s")] = 0.30
	s := summarize(m, map[string]string{"daemons": "iosched"})
	if got := s.RoundRatios["iosched: burst_converge/raw_write"]; len(got) != 1 || math.Abs(got[0]-1.25) > 1e-9 {
		t.Errorf("round ratios %v, want round 1's alone", got)
	}
	for _, tg := range s.Targets {
		if tg.What == "hot-plugged: creation with the daemon / with the raw writer" {
			t.Errorf("judged without figures: %+v", tg)
		}
	}
}

// With the floor among the builds, each other build's figures are also
// given as ratios to the floor's of the same round; the floor gets none
// to itself.
func TestSummarizeFloor(t *testing.T) {
	t.Parallel()
	m := metrics{"reps": 2}
	round := func(r int, k string, v float64) { m[roundKey(r, k)] = v }
	for r, f := range []struct{ dConv, fConv, dCPU, fCPU float64 }{
		{0.60, 0.40, 0.30, 0.20},
		{0.50, 0.25, 0.40, 0.40},
	} {
		r++
		round(r, "iosched_hotplug.converge_s", f.dConv)
		round(r, "floor_hotplug.converge_s", f.fConv)
		round(r, "iosched_burst_cpu_s", f.dCPU)
		round(r, "floor_burst_cpu_s", f.fCPU)
	}
	s := summarize(m, map[string]string{"daemons": "iosched,floor"})
	got := s.RoundRatios["iosched: hotplug_converge/floor_hotplug_converge"]
	if len(got) != 2 || math.Abs(got[0]-1.5) > 1e-9 || math.Abs(got[1]-2) > 1e-9 {
		t.Errorf("hot-plug converged, iosched / floor, each round: %v, want [1.5 2]", got)
	}
	if r := s.Ratios["iosched: burst_cpu/floor_burst_cpu"]; math.Abs(r-1.25) > 1e-9 {
		t.Errorf("burst CPU, iosched / floor: %v, want the median 1.25", r)
	}
	for k := range s.Ratios {
		if strings.HasPrefix(k, "floor: ") && strings.Contains(k, "/floor_") {
			t.Errorf("floor given a ratio to itself: %s", k)
		}
	}
}
