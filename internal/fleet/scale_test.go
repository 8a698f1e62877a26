package fleet

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/promtest"
)

// The scale of the fleet the 10,000-disk test and benchmark load: 1000
// machines of ten disks, each machine with disks of two of 50 keys, every
// disk with its busy-depth histogram and curves of two candidates at nine
// depths.
const (
	scaleMachines     = 1000
	scaleDisksPer     = 10
	scaleKeys         = 50
	scaleMachinesPerK = scaleMachines * 2 / scaleKeys
)

var scaleDepths = []int{1, 2, 4, 8, 16, 32, 64, 128, 256}

func scaleKey(i int) string {
	return fmt.Sprintf("virtio/virtio_blk/model-%02d/hwq%d/qd256/10737418240B/6.18.0", i, 1+i%2)
}

// scaleFleet: disk j of machine m is of key (m + 7*(j/5)) mod 50, busy
// half the time, spread over the buckets by its place; its curves differ
// a little from machine to machine.
func scaleFleet() []promtest.Machine {
	fleet := make([]promtest.Machine, scaleMachines)
	for m := range fleet {
		fleet[m].Instance = fmt.Sprintf("10.0.%d.%d:9100", m/256, m%256)
		for j := range scaleDisksPer {
			k := (m + 7*(j/5)) % scaleKeys
			curves := map[string]map[int]float64{"none": {}, "mq-deadline": {}}
			for _, d := range scaleDepths {
				base := 20000 * math.Sqrt(float64(d))
				curves["none"][d] = base * (1 + 0.001*float64(m%17))
				curves["mq-deadline"][d] = base * (1.1 - 0.02*math.Log2(float64(d)))
			}
			fleet[m].Disks = append(fleet[m].Disks, promtest.Disk{
				Name: fmt.Sprintf("vd%c", 'a'+j), Key: scaleKey(k), Source: "probed",
				Busy:   map[int]float64{j % 10: 0.3, (j + 3) % 10: 0.2},
				Curves: curves,
			})
		}
	}
	return fleet
}

// scaleServer loads the fleet: two samples a series, an hour apart.
func scaleServer(tb testing.TB, end time.Time) *promtest.Server {
	return promtest.StartServer(tb, promtest.ServerOptions{OpenMetrics: promtest.OpenMetrics(scaleFleet(), end, time.Hour, time.Hour)})
}

// Ten thousand disks' series answered whole: every key with its 40
// machines, 200 disks, 100 busy hours, both curves over every machine and
// a verdict over every machine; a match of every disk, which joins the
// series to the disks' info, answers the same. How long the query takes
// is the benchmark's to report (BenchmarkQuery10000Disks), not a limit
// here.
func TestQuery10000Disks(t *testing.T) {
	end := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC) // both samples in one of promtool's 2-hour blocks
	srv := scaleServer(t, end)
	start := time.Now()
	rep, err := Query(context.Background(), srv.API, Options{Range: time.Hour, At: end, MinMachines: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 disks: Query took %s", time.Since(start))
	start = time.Now()
	every, err := Query(context.Background(), srv.API, Options{Match: `{job="node"}`, Range: time.Hour, At: end, MinMachines: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 disks: Query matching every disk took %s", time.Since(start))
	if !reflect.DeepEqual(rep, every) {
		t.Error("the report of a match of every disk differs from the report of no match")
	}
	if len(rep.Keys) != scaleKeys {
		t.Fatalf("%d keys, want %d", len(rep.Keys), scaleKeys)
	}
	for _, k := range rep.Keys {
		if k.Machines != scaleMachinesPerK || k.Disks != 5*scaleMachinesPerK || !near(k.BusyHours, 0.5*5*scaleMachinesPerK) {
			t.Errorf("%s: %d machines, %d disks, %g busy hours; want %d, %d, %g", k.Key, k.Machines, k.Disks, k.BusyHours,
				scaleMachinesPerK, 5*scaleMachinesPerK, 0.5*5*scaleMachinesPerK)
		}
		if len(k.Curves) != 2 || len(k.Curves[0].Points) != len(scaleDepths) || k.Curves[0].Points[0].Machines != scaleMachinesPerK {
			t.Errorf("%s: curves %+v, want two of %d points over %d machines", k.Key, k.Curves, len(scaleDepths), scaleMachinesPerK)
		}
		if len(k.Verdicts) != 1 || k.Verdicts[0].Machines != scaleMachinesPerK || k.Verdicts[0].Low > k.Verdicts[0].Change || k.Verdicts[0].High < k.Verdicts[0].Change {
			t.Errorf("%s: verdicts %+v (note %q), want one over %d machines, its change within its range", k.Key, k.Verdicts, k.Note, scaleMachinesPerK)
		}
	}
}

// BenchmarkQuery10000Disks reports how long fleet.Query takes for the
// 10,000-disk fleet (the server started once, outside the timing), the
// CPU time the server spent on it (server-cpu-s/op), which another load
// on the machine stretches less than the wall time, and the bytes the
// server allocated for it (server-alloc-MB/op, from its own
// go_memstats_alloc_bytes_total), which another load does not change:
//
//	go test -run '^$' -bench Query10000 -benchtime 5x ./internal/fleet
func BenchmarkQuery10000Disks(b *testing.B) {
	end := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC) // both samples in one of promtool's 2-hour blocks
	srv := scaleServer(b, end)
	cpu0, alloc0 := cpuTime(b, srv.PID), allocBytes(b, srv)
	for b.Loop() {
		rep, err := Query(context.Background(), srv.API, Options{Range: time.Hour, At: end, MinMachines: 3})
		if err != nil || len(rep.Keys) != scaleKeys {
			b.Fatalf("%v, %v", rep, err)
		}
	}
	cpu, alloc := cpuTime(b, srv.PID), allocBytes(b, srv)
	b.ReportMetric((cpu-cpu0).Seconds()/float64(b.N), "server-cpu-s/op")
	b.ReportMetric((alloc-alloc0)/1e6/float64(b.N), "server-alloc-MB/op")
}

// BenchmarkQuery10000DisksJoin compares, on one server and in
// alternation, so that another load on the machine weighs on both alike,
// Query without a match, which sums the series by their own key
// (direct-s/op), with a match of every disk, which keeps the series
// whose disk and key a selected info series has (match-s/op), and the
// queries as they were before the series carried their key, which joined
// every series to one info series a disk (old-s/op). The three give the
// same report:
//
//	go test -run '^$' -bench Query10000DisksJoin -benchtime 5x -count 3 ./internal/fleet
func BenchmarkQuery10000DisksJoin(b *testing.B) {
	end := time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC) // both samples in one of promtool's 2-hour blocks
	srv := scaleServer(b, end)
	o := Options{Range: time.Hour, At: end, MinMachines: 3}
	every := o
	every.Match = `{job="node"}`
	const info = `topk by (instance, disk) (1, last_over_time(iosched_disk_info[1h]))`
	const curves = `quantile by (key, instance, scheduler, depth, source) (0.5, iosched_probe_curve_iops{scheduler%s"none"} * on (instance, disk) group_left (key) ` + info + `)`
	old := queries{
		disks:  `count by (key, instance) (` + info + `)`,
		busy:   `sum by (key, le) (increase(iosched_disk_busy_depth_seconds_bucket[1h]) * on (instance, disk) group_left (key) ` + info + `)`,
		curves: []string{fmt.Sprintf(curves, "="), fmt.Sprintf(curves, "!=")},
	}
	ways := []struct {
		o Options
		q queries
	}{{o, queriesFor(o)}, {every, queriesFor(every)}, {o, old}}
	var took [3]time.Duration
	var reports [3]*Report
	for b.Loop() {
		for i, w := range ways {
			start := time.Now()
			rep, err := query(context.Background(), srv.API, w.o, w.q)
			took[i] += time.Since(start)
			if err != nil || len(rep.Keys) != scaleKeys {
				b.Fatalf("%v, %v", rep, err)
			}
			reports[i] = rep
		}
	}
	if !reflect.DeepEqual(reports[0], reports[1]) || !reflect.DeepEqual(reports[0], reports[2]) {
		b.Fatal("the three ways' reports differ")
	}
	b.ReportMetric(took[0].Seconds()/float64(b.N), "direct-s/op")
	b.ReportMetric(took[1].Seconds()/float64(b.N), "match-s/op")
	b.ReportMetric(took[2].Seconds()/float64(b.N), "old-s/op")
	b.ReportMetric(took[0].Seconds()/took[2].Seconds(), "direct/old")
}

// allocBytes is the bytes the server allocated since it started, as its
// own metrics say (their scrape allocates a little too, the same each
// time).
func allocBytes(tb testing.TB, srv *promtest.Server) float64 {
	tb.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "go_memstats_alloc_bytes_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				tb.Fatalf("%s/metrics: %q: %v", srv.URL, line, err)
			}
			return f
		}
	}
	tb.Fatalf("%s/metrics has no go_memstats_alloc_bytes_total", srv.URL)
	return 0
}

// cpuTime is a process's user and system time, from /proc/PID/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuTime(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[0] is field 3
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
