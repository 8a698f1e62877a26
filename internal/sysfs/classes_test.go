package sysfs

import (
	"slices"
	"strings"
	"testing"
)

// Walks the table of classes: each entry is consistent with itself and
// with the others, every list derived from it (Classes, IsClass, Spec)
// agrees with it, and every disk of the cloud fixture is recognised by its
// class's entry: its name by the class's naming convention and no other's,
// its driver among the class's, and a disk of a bio-based class read as
// bio-based.
func TestClassTable(t *testing.T) {
	t.Parallel()
	drivers := map[string]Class{}
	markers := map[string]Class{}
	for i, s := range ClassSpecs() {
		if Classes[i] != s.Class || !IsClass(string(s.Class)) || s.Class.Spec().Class != s.Class {
			t.Errorf("%s: Classes, IsClass or Spec disagree with the table", s.Class)
		}
		if slices.Index(Classes, s.Class) != i {
			t.Errorf("%s: listed twice", s.Class)
		}
		if s.Class == ClassUnknown {
			if i != len(Classes)-1 || s.Drivers != nil || s.Module != "" || s.Marker != "" || s.Names != nil || s.BioBased || s.Tuned != TunedByParent {
				t.Errorf("unknown: last, and nothing recognises it")
			}
			continue
		}
		if s.Names == nil || !strings.HasPrefix(s.Names.String(), "^") {
			t.Errorf("%s: no naming convention anchored at the name's start: %v", s.Class, s.Names)
		}
		if len(s.Drivers) == 0 && s.Module == "" {
			t.Errorf("%s: neither a driver bound nor a module: Driver would be blank", s.Class)
		}
		for _, d := range s.Drivers {
			if other, ok := drivers[d]; ok {
				t.Errorf("driver %s makes both %s and %s", d, other, s.Class)
			}
			drivers[d] = s.Class
		}
		if s.Marker != "" {
			if other, ok := markers[s.Marker]; ok {
				t.Errorf("marker %s makes both %s and %s", s.Marker, other, s.Class)
			}
			markers[s.Marker] = s.Class
		}
		// tuned judges a disk by its parent device: only a class whose
		// disks have one (a driver bound to it) can be judged whole.
		if s.Tuned != TunedByParent && len(s.Drivers) == 0 {
			t.Errorf("%s: tuned's verdict without a parent device to judge", s.Class)
		}
		if s.BioBased != (s.bioBasedBy() != "") {
			t.Errorf("%s: bio-based %t, evidence %q", s.Class, s.BioBased, s.bioBasedBy())
		}
	}
	if IsClass("nonsense") || Class("nonsense").Spec().Class != ClassUnknown {
		t.Error("a string that names no class is a class")
	}

	fs := newFS(t, cloudTree)
	for _, w := range cloudDisks {
		if got := classByName(w.name); got != w.class {
			t.Errorf("%s (%s): named like %s", w.name, w.class, got)
		}
		s := w.class.Spec()
		if w.class != ClassUnknown && !slices.Contains(s.Drivers, w.driver) && s.Module != w.driver {
			t.Errorf("%s (%s): driver %q is not the class's (%v, module %q)", w.name, w.class, w.driver, s.Drivers, s.Module)
		}
		if s.BioBased {
			d, err := fs.Device(w.name)
			if err != nil {
				t.Fatal(err)
			}
			if !d.BioBased() {
				t.Errorf("%s (%s): a bio-based class, not read as bio-based", w.name, w.class)
			}
		}
	}
}

func TestKernelScheduler(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		class Class
		hwq   int
		want  string
	}{
		{ClassVirtio, 1, "mq-deadline"},
		{ClassVirtio, 4, "none"},
		{ClassSCSI, 0, "mq-deadline"}, // queues not known: one
		{ClassNVMe, 8, "none"},
		{ClassLoop, 1, "none"}, // loop asks for none
		{ClassZRAM, 0, ""},     // bio-based: no scheduler
		{ClassRAM, 1, ""},
	} {
		if got := KernelScheduler(c.class, c.hwq); got != c.want {
			t.Errorf("KernelScheduler(%s, %d) = %q, want %q", c.class, c.hwq, got, c.want)
		}
	}
}
