package pipeline

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// loopTree makes a fake sysfs tree of n loop disks (loop0...) offering
// none and mq-deadline.
func loopTree(tb testing.TB, n int) sysfs.FS {
	tb.Helper()
	root := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "block"), 0o755); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("loop%d", i)
		dir := filepath.Join(root, "devices", "virtual", "block", name)
		for rel, text := range map[string]string{
			"dev":               fmt.Sprintf("7:%d\n", i),
			"size":              "2097152\n",
			"queue/scheduler":   "[none] mq-deadline\n",
			"queue/nr_requests": "128\n",
			"queue/rotational":  "0\n",
			"mq/0/nr_tags":      "128\n",
		} {
			p := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tb.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				tb.Fatal(err)
			}
		}
		if err := os.Symlink(filepath.Join("..", "devices", "virtual", "block", name), filepath.Join(root, "block", name)); err != nil {
			tb.Fatal(err)
		}
	}
	fs, err := sysfs.NewFS(root)
	if err != nil {
		tb.Fatal(err)
	}
	return fs
}

// writeSeedFile writes a valid seeded file of at least size bytes, one
// result at a time (never held whole), of disks unlike the tree's (another
// size): every lookup reads them all and finds none. It returns the
// file's size.
func writeSeedFile(tb testing.TB, path string, size int64) int64 {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	at := time.Now().Add(-time.Hour).UTC()
	depths := []int{1, 4, 16, 64}
	cand := func(name string, iops float64) probe.Candidate {
		var curve []probe.CurvePoint
		for _, d := range depths {
			curve = append(curve, probe.CurvePoint{Depth: d, ObservedDepth: float64(d), IOPS: iops * float64(d), P50us: 40, P99us: 90})
		}
		fig := probe.Figures{IOPS: iops, MiBs: iops / 256, P50us: 40, P99us: 90, P999us: 120, QD1IOPS: iops / 4, QD1P50: 20, QD1P99: 50, QD1P999: 70, CPUPerIOus: 3}
		rounds := []probe.RoundFigures{{Round: 1, Position: 1, Figures: fig, Curve: curve}, {Round: 2, Position: 2, Figures: fig, Curve: curve}, {Round: 3, Position: 1, Figures: fig, Curve: curve}}
		return probe.Candidate{Scheduler: name, Figures: fig, Rounds: rounds, Curve: curve}
	}
	var n int64
	write := func(s string) {
		k, err := w.WriteString(s)
		if err != nil {
			tb.Fatal(err)
		}
		n += int64(k)
	}
	write(`{"version": 1, "results": [`)
	for i := 0; n < size; i++ {
		rec := probe.Record{
			Key:    probe.Key{Class: "loop", Driver: "loop", HWQueues: 1, QueueDepth: 128, SizeBytes: uint64(i+1) << 30, Kernel: "6.18.0"},
			Device: fmt.Sprintf("loop%d", i), At: at,
			Method:    probe.Method{Engine: probe.EnginePsync, Depth: 32, BlockSize: 4096, Depths: depths, Candidates: []string{"none", "mq-deadline"}},
			DurationS: 12, Rounds: 3, Incumbent: "none",
			Figures: []probe.Candidate{cand("none", 100e3+float64(i)), cand("mq-deadline", 90e3)},
		}
		b, err := json.Marshal(rec)
		if err != nil {
			tb.Fatal(err)
		}
		if i > 0 {
			write(",\n")
		}
		write(string(b))
	}
	write("]}\n")
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return n
}

const loopProbingPolicy = `
[[rule]]
name = "loop disks"
[rule.match]
class = "loop"
[rule.set]
scheduler = "mq-deadline"
[rule.probe]
candidates = ["none", "mq-deadline"]
engine = "psync"
[daemon]
probe_results = [%q]
`

// lookUpAll looks up every disk's probe decision under pol, parallel at
// once, as the daemon's start scan does.
func lookUpAll(tb testing.TB, p *Pipeline, pol *policy.Policy, names []string, parallel int) {
	tb.Helper()
	var wg sync.WaitGroup
	next := make(chan string)
	for range parallel {
		wg.Go(func() {
			for name := range next {
				dev, err := p.FS.DeviceFacts(name, pol.Needs())
				if err == nil {
					_, err = p.LookUpProbe(pol, dev, nil)
				}
				if err != nil {
					tb.Error(err)
				}
			}
		})
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
}

// TestSeedsReadOncePerPolicy: the lookups of many disks under one policy
// share one decoding of its seeded files and of probes.json, so what a
// lookup allocates does not grow with the files' size: with 4 MiB files
// it allocates about what it does with files of one result (reading the
// disk). Before, each lookup read and decoded every seeded file and
// probes.json again: more than their size a disk. Not parallel: it
// counts the process's allocations.
func TestSeedsReadOncePerPolicy(t *testing.T) {
	const disks = 40
	fs := loopTree(t, disks)
	names, err := fs.Disks()
	if err != nil || len(names) != disks {
		t.Fatalf("disks %v, %v", names, err)
	}
	// perLookup is what a lookup allocates, on average over the disks,
	// with a seeded file and a probes.json of at least size bytes each,
	// once the first lookup has read them. It returns the files' size.
	perLookup := func(size int64) (alloc, written int64) {
		seed := filepath.Join(t.TempDir(), "fleet.json")
		written = writeSeedFile(t, seed, size)
		p := &Pipeline{FS: fs, Nodes: &nodesSeen{}, StateDir: t.TempDir()}
		written = min(written, writeSeedFile(t, filepath.Join(p.StateDir, "probes.json"), size))
		pol := parse(t, fmt.Sprintf(loopProbingPolicy, seed))
		if err := SeedsOf(pol).Err(); err != nil {
			t.Fatalf("a valid seeded file: %v", err)
		}
		lookUpAll(t, p, pol, names[:1], 1) // the first reads probes.json
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lookUpAll(t, p, pol, names, 8)
		runtime.ReadMemStats(&after)
		return int64(after.TotalAlloc-before.TotalAlloc) / disks, written
	}
	small, _ := perLookup(1)
	large, size := perLookup(4 << 20)
	t.Logf("a lookup allocated %d bytes with files of one result, %d with files of %d bytes", small, large, size)
	if large-small > size/16 {
		t.Errorf("a lookup allocated %d bytes more with files of %d bytes: it decodes them again", large-small, size)
	}
	// Another policy load reads the files again: an edited file is seen.
	seed := filepath.Join(t.TempDir(), "fleet.json")
	pol, pol2 := parse(t, fmt.Sprintf(loopProbingPolicy, seed)), parse(t, fmt.Sprintf(loopProbingPolicy, seed))
	if SeedsOf(pol2) == SeedsOf(pol) {
		t.Error("two policy loads share their seeds")
	}
}

// BenchmarkSeedsLookup1000 looks up 1000 disks' probe decisions, 64 at a
// time (the daemon's --parallel), under a policy whose seeded file is the
// largest accepted (just under 64 MiB). Run under /usr/bin/time -v for
// the peak RSS (see packaging/man/iosched-policy.5's probe_results):
//
//	go test -c -o /tmp/pipeline.test ./pipeline
//	/usr/bin/time -v /tmp/pipeline.test -test.run '^$' -test.bench SeedsLookup1000 -test.benchtime 1x
func BenchmarkSeedsLookup1000(b *testing.B) {
	fs := loopTree(b, 1000)
	seed := filepath.Join(b.TempDir(), "fleet.json")
	size := writeSeedFile(b, seed, 64<<20-64<<10)
	names, err := fs.Disks()
	if err != nil {
		b.Fatal(err)
	}
	var peak uint64
	for b.Loop() {
		pol, err := policy.Parse(policy.File{Name: "bench.toml", Data: []byte(fmt.Sprintf(loopProbingPolicy, seed))})
		if err != nil {
			b.Fatal(err)
		}
		p := &Pipeline{FS: fs, Nodes: &nodesSeen{}, StateDir: b.TempDir()}
		done := make(chan struct{})
		sampled := make(chan uint64)
		go func() {
			var m runtime.MemStats
			var top uint64
			for {
				runtime.ReadMemStats(&m)
				top = max(top, m.HeapInuse)
				select {
				case <-done:
					sampled <- top
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		lookUpAll(b, p, pol, names, 64)
		close(done)
		peak = max(peak, <-sampled)
	}
	b.ReportMetric(float64(size)/(1<<20), "seed-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
