package apply

import (
	"context"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// realFS is the live /sys; tests only ever name the loop devices they made.
func realFS(t testing.TB) sysfs.FS {
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestIntegrationApplyLoops(t *testing.T) {
	looptest.Require(t)
	fs := realFS(t)
	var loops []*looptest.Loop
	for n := 7200; n < 7203; n++ {
		loops = append(loops, looptest.Add(t, n))
	}
	plans := func() []plan.Plan {
		var ps []plan.Plan
		for _, l := range loops {
			ps = append(ps, plan.Plan{Name: l.Name, Changes: []plan.Change{
				{Attribute: "scheduler", To: "mq-deadline", Rule: "test"},
				{Attribute: "iosched/fifo_batch", To: "8", Rule: "test"},
				{Attribute: "nr_requests", To: "64", Rule: "test"},
			}})
		}
		return ps
	}
	a := &Applier{FS: fs}
	for _, r := range a.All(context.Background(), plans()) {
		if r.Failed() || r.Writes != 3 {
			t.Fatalf("first apply on %s: %d writes, %+v", r.Device, r.Writes, r.Outcomes)
		}
	}
	for _, l := range loops {
		for attr, want := range map[string]string{"scheduler": "mq-deadline", "iosched/fifo_batch": "8", "nr_requests": "64"} {
			if got, err := fs.ReadQueueAttr(l.Name, attr); err != nil || got != want {
				t.Errorf("%s %s = %q, %v; want %q", l.Name, attr, got, err, want)
			}
		}
	}
	// Everything is in place: a second apply writes nothing.
	for _, r := range a.All(context.Background(), plans()) {
		if r.Failed() || r.Writes != 0 {
			t.Fatalf("second apply on %s: %d writes, want 0: %+v", r.Device, r.Writes, r.Outcomes)
		}
	}

	// A disk that goes away after planning is reported; the others are done.
	ps := plans()
	for i := range ps {
		ps[i].Changes = []plan.Change{{Attribute: "scheduler", To: "none", Rule: "test"}}
	}
	loops[1].Remove(t)
	rs := a.All(context.Background(), ps)
	if !rs[1].Gone {
		t.Errorf("%s removed before apply: not reported gone: %+v", rs[1].Device, rs[1])
	}
	for _, i := range []int{0, 2} {
		if rs[i].Failed() {
			t.Errorf("%s: %+v", rs[i].Device, rs[i].Outcomes)
		}
		if got, _ := fs.ReadQueueAttr(loops[i].Name, "scheduler"); got != "none" {
			t.Errorf("%s scheduler %q, want none", loops[i].Name, got)
		}
	}
}

// Through a disk's open directory (what the daemon does for a new disk),
// in the same order and with the same outcome as through the tree.
func TestIntegrationApplyThroughDiskHandle(t *testing.T) {
	looptest.Require(t)
	fs := realFS(t)
	l := looptest.Add(t, 7203)
	disk, err := fs.OpenDisk(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	p := plan.Plan{Name: l.Name, Changes: []plan.Change{
		{Attribute: "scheduler", From: "none", To: "mq-deadline", Rule: "test"},
		{Attribute: "nr_requests", To: "64", Rule: "test", After: "scheduler"},
		{Attribute: "iosched/fifo_batch", To: "8", Rule: "test", After: "scheduler"},
	}}
	r := (&Applier{}).ApplyTo(context.Background(), disk, p)
	if r.Failed() || r.Writes != 3 {
		t.Fatalf("%d writes, %+v", r.Writes, r.Outcomes)
	}
	for _, o := range r.Outcomes {
		if o.Status != Written || o.Got != o.To {
			t.Errorf("%s: %s, got %q", o.Attribute, o.Status, o.Got)
		}
		if got, err := fs.ReadQueueAttr(l.Name, o.Attribute); err != nil || got != o.To {
			t.Errorf("%s read by name = %q, %v; want %q", o.Attribute, got, err, o.To)
		}
	}
}
