package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Remember keeps the newest result of each key and method, and drops the
// results of a kernel not seen running for KernelRetention (when it last
// ran is remembered with the results); the running kernel's are kept
// whatever their age.
func TestRememberPrunes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := OpenStore(dir, nil)
	now := time.Now().UTC()
	running := kernelRelease()
	rec := func(device, kernel string, at time.Time) Record {
		r := seedRecord(device, at)
		r.Key.Kernel = kernel
		r.Key.Model = device // a key of its own
		return r
	}
	dup := rec("vdd", running, now.Add(-48*time.Hour))
	dupNewer := dup
	dupNewer.At = now.Add(-24 * time.Hour)
	old := rec("vdo", "5.10.0-old", now.Add(-40*24*time.Hour))
	rolledBack := rec("vdr", "6.1.0-rollback", now.Add(-40*24*time.Hour))
	ancient := rec("vda", running, now.Add(-400*24*time.Hour))
	f := storeFile{Version: storeVersion, Results: []Record{dupNewer, old, rolledBack, dup, ancient},
		// 6.1.0-rollback ran 10 days ago: its results stay.
		Kernels: map[string]time.Time{"6.1.0-rollback": now.Add(-10 * 24 * time.Hour), "5.10.0-old": now.Add(-31 * 24 * time.Hour), running: now.Add(-24 * time.Hour)}}
	b, err := encodeStore(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Remember(rec("vdn", running, now)); err != nil {
		t.Fatal(err)
	}
	got, err := readStore(s.Path(), true, maxStoreFile)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, r := range got.Results {
		kept = append(kept, r.Device+"@"+r.At.Format(time.DateOnly))
	}
	slices.Sort(kept)
	want := []string{"vda@" + ancient.At.Format(time.DateOnly), "vdd@" + dupNewer.At.Format(time.DateOnly), "vdn@" + now.Format(time.DateOnly), "vdr@" + rolledBack.At.Format(time.DateOnly)}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v (the newest of vdd, vdo's kernel gone 31 days, vdr's seen 10 days ago)", kept, want)
	}
	if _, ok := got.Kernels["5.10.0-old"]; ok || !got.Kernels[running].Equal(now) {
		t.Errorf("kernels %v: want 5.10.0-old forgotten, %s seen now", got.Kernels, running)
	}
}

// A probes.json past its cap (written before pruning) is pruned to fit,
// the oldest results dropped first, not moved aside whole. Before, the
// next probe moved every result aside as unreadable and kept its own.
func TestRememberPrunesAnOversizedFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := OpenStore(dir, nil)
	now := time.Now().UTC()
	// Results padded (a long serial) so that few fill the file.
	one := func(i int) Record {
		r := seedRecord(fmt.Sprintf("vd%d", i), now.Add(-time.Duration(i+1)*time.Minute))
		r.Key.Kernel, r.Key.SizeBytes, r.Serial = kernelRelease(), uint64(i+1)<<30, strings.Repeat("s", 16<<10)
		return r
	}
	b, err := encodeStore(storeFile{Version: storeVersion, Results: []Record{one(0)}})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, (maxStoreFile+1<<20)/len(b)+1)
	for i := range recs {
		recs[i] = one(i)
	}
	if b, err = encodeStore(storeFile{Version: storeVersion, Results: recs}); err != nil {
		t.Fatal(err)
	}
	if len(b) <= maxStoreFile {
		t.Fatalf("%d bytes: not past the cap", len(b))
	}
	if err := os.WriteFile(s.Path(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	newest := seedRecord("vdnew", now)
	newest.Key.Kernel, newest.Key.Model = kernelRelease(), "new"
	if err := s.Remember(newest); err != nil {
		t.Fatalf("Remember: %v", err)
	}
	if aside, _ := filepath.Glob(s.Path() + ".unreadable-*"); len(aside) != 0 {
		t.Errorf("moved aside: %v", aside)
	}
	st, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > pruneSize {
		t.Errorf("%d bytes after pruning, want at most %d", st.Size(), pruneSize)
	}
	got, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(recs)/2 {
		t.Errorf("%d of %d results kept, want most", len(got), len(recs))
	}
	// The newest kept, the oldest gone.
	has := map[string]bool{}
	for _, r := range got {
		has[r.Device] = true
	}
	if !has["vdnew"] || !has["vd0"] || has[fmt.Sprintf("vd%d", len(recs)-1)] {
		t.Errorf("kept the newest %v, vd0 %v, the oldest %v: want the oldest dropped", has["vdnew"], has["vd0"], has[fmt.Sprintf("vd%d", len(recs)-1)])
	}
}

// The first result under a kernel the file has not seen starts the other
// kernels' retention: they ran until this boot, however old their last
// result (a file from before kernels were noted, a machine that probed
// nothing for months).
func TestRememberNewKernelKeepsTheOthers(t *testing.T) {
	t.Parallel()
	s := OpenStore(t.TempDir(), nil)
	now := time.Now().UTC()
	old := seedRecord("vdo", now.Add(-400*24*time.Hour))
	old.Key.Kernel = "5.10.0-before"
	if err := writeStore(s.Path(), []Record{old}); err != nil {
		t.Fatal(err)
	}
	rec := seedRecord("vdn", now)
	rec.Key.Kernel, rec.Key.Model = kernelRelease(), "new"
	if err := s.Remember(rec); err != nil {
		t.Fatal(err)
	}
	got, err := readStore(s.Path(), true, maxStoreFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 2 || !got.Kernels["5.10.0-before"].Equal(now) {
		t.Errorf("%d results, kernels %v: want the older kernel's kept, its retention from now", len(got.Results), got.Kernels)
	}
}
