package sysfs

import "testing"

// Every tunable has a bit of its own inside FactAll, above the other facts,
// and the bits fit in Facts.
func TestFactBits(t *testing.T) {
	t.Parallel()
	seen := FactIOSched<<1 - 1 // the fact bits below the tunables'
	for _, name := range Tunables() {
		b := name.Facts()
		if b == 0 || b&seen != 0 || b&FactAll != b {
			t.Errorf("%s.Needs() = %b: not a bit of its own within FactAll %b", name, b, FactAll)
		}
		seen |= b
	}
	if Attr("scheduler").Facts() != 0 {
		t.Error("the scheduler is read by every read")
	}
	if Attr("iosched/fifo_batch").Facts() != FactIOSched || Attr("iosched/out_of_tree").Facts() != FactIOSched {
		t.Error("a parameter needs FactIOSched")
	}
	if Attr("io_poll").Facts() != 0 {
		t.Error("io_poll is refused: never read")
	}
}

// A disk read for some facts leaves the others unknown, never wrong.
func TestDeviceFactsReadsOnlyWhatIsAsked(t *testing.T) {
	t.Parallel()
	fs := newFS(t, cloudTree)
	d, err := fs.DeviceFacts("sdb", FactRotational|Attr("nr_requests").Facts())
	if err != nil {
		t.Fatal(err)
	}
	if d.Rotational == nil || !*d.Rotational || d.Class != ClassSCSI || d.Scheduler == nil || d.MajorMinor == "" {
		t.Errorf("always-read facts or the asked ones missing: %+v", d)
	}
	if d.Model != "" || d.SizeBytes != nil || d.Removable != nil || len(d.IOSched) != 0 || len(d.Tunables) != 1 {
		t.Errorf("facts not asked for were read: model %q size %v removable %v iosched %v tunables %v", d.Model, d.SizeBytes, d.Removable, d.IOSched, d.Tunables)
	}
}
