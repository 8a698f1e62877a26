package observe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestParseStat: every field count kernels give parses into the same
// fields; what is not a stat file is refused with the field named.
func TestParseStat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want Stat
		err  string
	}{
		{file: "stat-11", want: Stat{ReadIOs: 1200, ReadMerges: 3, ReadSectors: 19200, ReadTicks: 240, WriteIOs: 100, WriteSectors: 1600, WriteTicks: 60, InFlight: 2, IOTicks: 250, TimeInQueue: 300, Fields: 11}},
		{file: "stat-15", want: Stat{ReadIOs: 1200, ReadMerges: 3, ReadSectors: 19200, ReadTicks: 240, WriteIOs: 100, WriteSectors: 1600, WriteTicks: 60, InFlight: 2, IOTicks: 250, TimeInQueue: 300, Fields: 15}},
		{file: "stat-17", want: Stat{ReadIOs: 41496, ReadMerges: 6504, ReadSectors: 1650882, ReadTicks: 10910, WriteIOs: 5159, WriteMerges: 39142, WriteSectors: 1733376, WriteTicks: 5241,
			IOTicks: 7788, TimeInQueue: 17712, DiscardIOs: 8319, DiscardMerges: 23, DiscardSectors: 430648, DiscardTicks: 1352, FlushIOs: 369, FlushTicks: 207, Fields: 17}},
		{file: "stat-20", want: Stat{ReadIOs: 1, ReadMerges: 2, ReadSectors: 3, ReadTicks: 4, WriteIOs: 5, WriteMerges: 6, WriteSectors: 7, WriteTicks: 8, InFlight: 9, IOTicks: 10, TimeInQueue: 11,
			DiscardIOs: 12, DiscardMerges: 13, DiscardSectors: 14, DiscardTicks: 15, FlushIOs: 16, FlushTicks: 17, Fields: 20}},
		{file: "stat-short", err: "10 fields, want at least 11"},
		{file: "stat-empty", err: "0 fields, want at least 11"},
		{file: "stat-garbage", err: `field 5: "x5" is not an unsigned decimal`},
		{file: "stat-negative", err: `field 11: "-11" is not an unsigned decimal`},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseStat(b)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s:\n got %+v, %v\nwant %+v", tc.file, got, err, tc.want)
		}
	}
	if _, err := ParseStat([]byte("1 2 3 4 5 6 7 8 9 10 99999999999999999999999\n")); err == nil || !strings.Contains(err.Error(), "field 11") || !strings.Contains(err.Error(), "overflows") {
		t.Errorf("a field past 64 bits: %v", err)
	}
}

// TestDiskRead: a Disk reads its file again at each Read (a rewritten file
// gives the new counters), and every error names the file.
func TestDiskRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "stat")
	if err := os.WriteFile(p, []byte("1 0 8 0 0 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s1, err := d.Read()
	if err != nil || s1.ReadIOs != 1 || s1.At.IsZero() {
		t.Fatalf("first read: %+v, %v", s1, err)
	}
	if err := os.WriteFile(p, []byte("5 0 40 0 0 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := d.Read()
	if err != nil || s2.ReadIOs != 5 || !s2.At.After(s1.At) {
		t.Fatalf("second read: %+v, %v", s2, err)
	}
	if err := os.WriteFile(p, []byte("5 0 40 zero\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read(); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `field 4: "zero"`) {
		t.Errorf("a bad file: %v", err)
	}
	if err := os.WriteFile(p, []byte(strings.Repeat("1 ", 400)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read(); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a file too long: %v", err)
	}
	missing := filepath.Join(dir, "gone", "stat")
	if _, err := Open(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Read(); err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, unix.EBADF) {
		t.Errorf("after Close: %v", err)
	}
}

func sample(at time.Duration, s Stat) Sample {
	return Sample{Stat: s, At: time.Unix(1000, 0).Add(at)}
}

// TestBetween: the figures of a known interval; a tick field that wrapped
// at 32 bits is counted through; counters that went back, or no time, give
// no point.
func TestBetween(t *testing.T) {
	t.Parallel()
	a := sample(0, Stat{ReadIOs: 1000, ReadSectors: 8000, ReadTicks: 500, WriteIOs: 10, WriteSectors: 80, WriteTicks: 10, IOTicks: 100, TimeInQueue: 1000})
	// 2 s: 3000 reads and 1000 writes of 4 KiB, 8000 ms of latency, busy
	// 1500 ms, 24000 request-ms in flight.
	b := sample(2*time.Second, Stat{ReadIOs: 4000, ReadSectors: 8000 + 3000*8, ReadTicks: 500 + 6000, WriteIOs: 1010, WriteSectors: 80 + 1000*8, WriteTicks: 10 + 2000, IOTicks: 1600, TimeInQueue: 25000})
	p, err := Between(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := Point{At: b.At, Elapsed: 2 * time.Second, ReadIOPS: 1500, WriteIOPS: 500, ReadFraction: 0.75, MeanSizeBytes: 4096, LatencyUs: 2000, Busy: 0.75, QueueDepth: 12, BusyDepth: 16}
	if p != want {
		t.Errorf("got  %+v\nwant %+v", p, want)
	}
	if p.IOPS() != 2000 || p.Idle() {
		t.Errorf("IOPS %v idle %v", p.IOPS(), p.Idle())
	}

	// time_in_queue and the latency ticks wrapped at 2^32 ms.
	wa, wb := a, b
	wa.TimeInQueue, wb.TimeInQueue = tickWrap-1000, 23000
	wa.ReadTicks, wb.ReadTicks = tickWrap-10, 5990
	if p, err := Between(wa, wb); err != nil || p.QueueDepth != 12 || p.LatencyUs != 2000 {
		t.Errorf("wrapped ticks: %+v, %v", p, err)
	}

	for _, tc := range []struct {
		name   string
		before func(s *Stat)
		after  func(s *Stat)
	}{
		{"reads went back", nil, func(s *Stat) { s.ReadIOs = 10 }},
		{"sectors went back", nil, func(s *Stat) { s.WriteSectors = 0 }},
		{"busy went back: a reset, not a wrap", nil, func(s *Stat) { s.IOTicks = 50 }},
		{"a tick field past 32 bits went back", func(s *Stat) { s.TimeInQueue = 1 << 41 }, func(s *Stat) { s.TimeInQueue = 1 << 40 }},
		{"all zero: the disk was made again", nil, func(s *Stat) { *s = Stat{} }},
	} {
		x, y := a, b
		if tc.before != nil {
			tc.before(&x.Stat)
		}
		tc.after(&y.Stat)
		if p, err := Between(x, y); !errors.Is(err, ErrWentBack) {
			t.Errorf("%s: %+v, %v; want ErrWentBack", tc.name, p, err)
		}
	}
	if _, err := Between(b, a); !errors.Is(err, ErrNoTime) {
		t.Errorf("samples out of order: %v", err)
	}

	idle, err := Between(a, sample(time.Second, a.Stat))
	if err != nil || !idle.Idle() || idle.Busy != 0 || idle.BusyDepth != 0 || idle.LatencyUs != 0 {
		t.Errorf("idle: %+v, %v", idle, err)
	}
}

// BenchmarkSample is one sample of one disk, as the daemon takes it: a
// read of a held-open stat file and its parse (the first disk in
// /sys/block; nothing is written).
func BenchmarkSample(b *testing.B) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil || len(ents) == 0 {
		b.Skip("no /sys/block disks")
	}
	d, err := Open(StatPath("/sys", ents[0].Name()))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseStat is the parse alone, of a 17-field line.
func BenchmarkParseStat(b *testing.B) {
	line, err := os.ReadFile("testdata/stat-17")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseStat(line); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTicksBetween(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b, want uint64
		ok         bool
	}{
		{100, 350, 250, true},
		{7, 7, 0, true},
		{1<<32 - 100, 300, 400, true},
		// Within 32 bits any step back reads as a wrap; Between tells a
		// reset from one by the elapsed time.
		{500, 100, 1<<32 - 400, true},
		{1 << 33, 5, 0, false}, // wider than the kernel prints: went back
	} {
		if got, ok := TicksBetween(tc.a, tc.b); got != tc.want || ok != tc.ok {
			t.Errorf("TicksBetween(%d, %d) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}
