package sysfs

import (
	"slices"
	"strings"
	"testing"
)

// Walks the table of settable attributes: each entry is consistent with
// itself, and every list derived from it (Kind, Tunables, Needs, Settable,
// the write order, Resets, HasParam) agrees with it.
func TestAttributeTable(t *testing.T) {
	t.Parallel()
	seen := map[Attr]bool{}
	var tunables []Attr
	for i, spec := range Attributes() {
		a := spec.Attr
		if seen[a] {
			t.Errorf("%s: listed twice", a)
		}
		seen[a] = true
		if !attrRe.MatchString(string(a)) {
			t.Errorf("%s: not the shape of an attribute iosched may write", a)
		}
		if a.Kind() != spec.Kind {
			t.Errorf("%s: Kind() = %v, the table says %v", a, a.Kind(), spec.Kind)
		}
		if got, ok := a.Spec(); !ok || got.Attr != a || specIndex(a) != i {
			t.Errorf("%s: Spec() finds another entry", a)
		}
		if a.Settable() != (spec.Refused == "") {
			t.Errorf("%s: Settable() = %t with Refused %q", a, a.Settable(), spec.Refused)
		}
		switch spec.Kind {
		case KindScheduler:
			if a != "scheduler" || spec.Rank != rankScheduler {
				t.Errorf("%s: the scheduler is queue/scheduler, written first", a)
			}
		case KindTunable:
			if strings.Contains(string(a), "/") || spec.Scheduler != "" {
				t.Errorf("%s: a tunable is a file of queue/ and no scheduler's", a)
			}
			if spec.Rank != rankTunable && spec.Rank != rankNrRequests {
				t.Errorf("%s: rank %d", a, spec.Rank)
			}
			if spec.Refused == "" {
				tunables = append(tunables, a)
				if a.Facts() == 0 {
					t.Errorf("%s: no fact bit: it would never be read", a)
				}
			} else if a.Facts() != 0 {
				t.Errorf("%s: refused, yet read", a)
			}
		case KindParam:
			if a.Param() == "" || spec.Scheduler == "" || spec.Rank != rankParam || !HasParam(spec.Scheduler, a.Param()) {
				t.Errorf("%s: a parameter names its scheduler and goes with the others", a)
			}
			for _, other := range []string{"mq-deadline", "bfq", "kyber"} {
				if other != spec.Scheduler && HasParam(other, a.Param()) {
					t.Errorf("%s: HasParam(%s) though it is %s's", a, other, spec.Scheduler)
				}
			}
		default:
			t.Errorf("%s: kind %v", a, spec.Kind)
		}
		if spec.Refused == "" && spec.Kind != KindScheduler && (spec.Range.Max <= spec.Range.Min || spec.Range.Min < 0) {
			t.Errorf("%s: no deliberate range: %+v", a, spec.Range)
		}
		for _, r := range spec.Resets {
			if _, ok := r.Spec(); !ok && r != AllParams {
				t.Errorf("%s resets %s, which the table does not have", a, r)
			}
			if r != AllParams && !a.Resets(r) {
				t.Errorf("%s.Resets(%s) = false", a, r)
			}
			// A write may only reset what is written after it.
			if r != AllParams && CompareWriteOrder(a, r) >= 0 {
				t.Errorf("%s resets %s, which is written before it", a, r)
			}
		}
	}
	if got := Tunables(); !slices.Equal(got, tunables) {
		t.Errorf("Tunables() = %v, the table's %v", got, tunables)
	}
	if HasParam("none", "fifo_batch") || !HasParam("out-of-tree", "anything") {
		t.Error("HasParam: none has no parameters, an unknown scheduler may have any")
	}
	if Attr("io_poll").Settable() || Attr("nonsense").Kind() != KindUnknown || !Attr("iosched/out_of_tree").Settable() {
		t.Error("Settable: io_poll is refused, an unknown name is not managed, any parameter is")
	}
}

// The write order: the scheduler, nr_requests, the parameters by name, the
// other tunables in table order, then anything unknown.
func TestWriteOrder(t *testing.T) {
	t.Parallel()
	want := []string{"scheduler", "nr_requests", "iosched/async_depth", "iosched/fifo_batch", "iosched/zz_out_of_tree",
		"read_ahead_kb", "nomerges", "rq_affinity", "add_random", "iostats", "wbt_lat_usec", "max_sectors_kb", "io_timeout", "unknown"}
	got := slices.Clone(want)
	slices.Reverse(got)
	SortByWriteOrder(got, func(s string) string { return s })
	if !slices.Equal(got, want) {
		t.Errorf("write order %v\nwant %v", got, want)
	}
	if !Attr("scheduler").Resets("iosched/anything") || !Attr("scheduler").Resets("nr_requests") ||
		!Attr("nr_requests").Resets("iosched/async_depth") || Attr("nr_requests").Resets("iosched/fifo_batch") || Attr("read_ahead_kb").Resets("nr_requests") {
		t.Error("Resets disagrees with the measured resets")
	}
}

// Device.Value and SetValue pick the map by the attribute's kind.
func TestDeviceValues(t *testing.T) {
	t.Parallel()
	old := "mq-deadline"
	d := &Device{Scheduler: &old, Tunables: map[string]string{"nr_requests": "64"}, IOSched: map[string]string{"fifo_batch": "16"}}
	if v, ok := d.Value("iosched/fifo_batch"); !ok || v != "16" {
		t.Errorf("Value(iosched/fifo_batch) = %q, %t", v, ok)
	}
	if v, ok := d.Value("nr_requests"); !ok || v != "64" {
		t.Errorf("Value(nr_requests) = %q, %t", v, ok)
	}
	d.SetValue("read_ahead_kb", "128")
	d.SetValue("scheduler", "mq-deadline")
	if len(d.IOSched) != 1 || d.Tunables["read_ahead_kb"] != "128" {
		t.Errorf("after SetValue: %v %v", d.Tunables, d.IOSched)
	}
	d.KeepValues([]Attr{"scheduler", "read_ahead_kb", "iosched/fifo_batch"})
	if len(d.Tunables) != 1 || len(d.IOSched) != 1 {
		t.Errorf("KeepValues kept %v %v", d.Tunables, d.IOSched)
	}
	d.SetValue("scheduler", "bfq")
	if v, _ := d.Value("scheduler"); v != "bfq" || len(d.IOSched) != 0 {
		t.Errorf("a scheduler switch keeps the old parameters: %v", d.IOSched)
	}
	d.DeleteValue("read_ahead_kb")
	if _, ok := d.Value("read_ahead_kb"); ok {
		t.Error("DeleteValue kept it")
	}
}
