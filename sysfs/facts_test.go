package sysfs

import "testing"

// Every tunable has a bit of its own inside FactAll, above the other facts.
func TestFactBits(t *testing.T) {
	seen := FactIOSched<<1 - 1 // the fact bits below the tunables'
	for _, name := range Tunables {
		b := FactTunable(name)
		if b == 0 || b&seen != 0 || b&FactAll == 0 {
			t.Errorf("FactTunable(%s) = %b: not a bit of its own within FactAll %b", name, b, FactAll)
		}
		seen |= b
	}
	if seen != FactAll {
		t.Errorf("FactAll = %b, the bits in use %b", FactAll, seen)
	}
	if FactTunable("scheduler") != 0 {
		t.Error("scheduler is not a tunable")
	}
}

// A disk read for some facts leaves the others unknown, never wrong.
func TestDeviceFactsReadsOnlyWhatIsAsked(t *testing.T) {
	fs := newFS(t, cloudTree)
	d, err := fs.DeviceFacts("sdb", FactRotational|FactTunable("nr_requests"))
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
