package apply

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// fakeDisk makes block/<name>/queue with the given files in a temp tree.
// Regular files stand in for sysfs attributes: a write replaces the content,
// so "scheduler" reads back as a bare word, which ParseScheduler takes as
// the active one.
func fakeTree(t *testing.T, disks map[string]map[string]string) sysfs.FS {
	t.Helper()
	root := t.TempDir()
	for name, files := range disks {
		for rel, content := range files {
			p := filepath.Join(root, "block", name, "queue", rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// recorder logs every read and write, and can fail writes.
type recorder struct {
	QueueAttrs
	mu     sync.Mutex
	log    []string
	failOn func(name, attr string, try int) error
	tries  map[string]int
}

func (r *recorder) ReadQueueAttr(name, attr string) (string, error) {
	r.mu.Lock()
	r.log = append(r.log, "read "+name+" "+attr)
	r.mu.Unlock()
	return r.QueueAttrs.ReadQueueAttr(name, attr)
}

func (r *recorder) WriteQueueAttr(name, attr, value string) error {
	r.mu.Lock()
	r.log = append(r.log, "write "+name+" "+attr+"="+value)
	if r.tries == nil {
		r.tries = map[string]int{}
	}
	r.tries[name+" "+attr]++
	try := r.tries[name+" "+attr]
	r.mu.Unlock()
	if r.failOn != nil {
		if err := r.failOn(name, attr, try); err != nil {
			return &sysfs.AttrError{Device: name, Attr: attr, Op: "write", Err: err}
		}
	}
	return r.QueueAttrs.WriteQueueAttr(name, attr, value)
}

func (r *recorder) writes() []string {
	var w []string
	for _, l := range r.log {
		if strings.HasPrefix(l, "write ") {
			w = append(w, strings.TrimPrefix(l, "write "))
		}
	}
	return w
}

func TestDeviceWritesInOrderAndReadsBack(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{
		"vda": {"scheduler": "none [mq-deadline] kyber", "nr_requests": "256", "read_ahead_kb": "128", "iosched/fifo_batch": "16"},
	})
	rec := &recorder{QueueAttrs: fs}
	a := &Applier{FS: rec}
	p := plan.Plan{Name: "vda", Changes: []plan.Change{
		{Attribute: "scheduler", From: "mq-deadline", To: "kyber", Rule: "r"},
		{Attribute: "nr_requests", To: "64", Rule: "r", After: "scheduler"},
		{Attribute: "iosched/fifo_batch", To: "8", Rule: "r", After: "nr_requests"},
		{Attribute: "read_ahead_kb", From: "128", To: "128", Rule: "r"}, // in place: no write
	}}
	r := a.Apply(context.Background(), p)
	want := []string{"vda scheduler=kyber", "vda nr_requests=64", "vda iosched/fifo_batch=8"}
	if got := rec.writes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("writes = %q, want %q", got, want)
	}
	// After the scheduler switch, every write was preceded by a read of the
	// same attribute: the switch may have reset it.
	for i, l := range rec.log {
		if strings.HasSuffix(l, "scheduler=kyber") {
			continue
		}
		if strings.HasPrefix(l, "write ") {
			attr := strings.SplitN(strings.Fields(l)[2], "=", 2)[0]
			if i == 0 || rec.log[i-1] != "read vda "+attr {
				t.Errorf("write %q not preceded by a read of %s (log %q)", l, attr, rec.log)
			}
		}
	}
	statuses := []Status{Written, Written, Written, Unchanged}
	for i, o := range r.Outcomes {
		if o.Status != statuses[i] {
			t.Errorf("%s: status %s, want %s (err %v)", o.Attribute, o.Status, statuses[i], o.Err)
		}
	}
	if r.Writes != 3 || r.Failed() {
		t.Errorf("writes %d failed %v, want 3 and false", r.Writes, r.Failed())
	}
	if got, _ := fs.ReadQueueAttr("vda", "scheduler"); got != "kyber" {
		t.Errorf("scheduler now %q", got)
	}
}

// resettingAttrs models the kernel: a scheduler switch sets nr_requests
// anew (blk_mq_init_sched).
type resettingAttrs struct{ *recorder }

func (r *resettingAttrs) WriteQueueAttr(name, attr, value string) error {
	err := r.recorder.WriteQueueAttr(name, attr, value)
	if err == nil && attr == "scheduler" {
		err = r.recorder.QueueAttrs.WriteQueueAttr(name, "nr_requests", "256")
	}
	return err
}

func TestValueResetBySwitchIsWrittenAgain(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"loop1": {"scheduler": "[none] mq-deadline", "nr_requests": "128"}})
	rec := &recorder{QueueAttrs: fs}
	// The snapshot showed nr_requests=128 as wanted: the plan still lists it
	// after the switch, for apply to read again.
	r := (&Applier{FS: &resettingAttrs{rec}}).Apply(context.Background(), plan.Plan{Name: "loop1", Changes: []plan.Change{
		{Attribute: "scheduler", From: "none", To: "mq-deadline"},
		{Attribute: "nr_requests", To: "128", After: "scheduler"},
	}})
	if r.Failed() || r.Outcomes[1].Status != Written || r.Outcomes[1].Before != "256" {
		t.Fatalf("outcomes %+v: nr_requests reset by the switch must be read again and written", r.Outcomes)
	}
	if got, _ := fs.ReadQueueAttr("loop1", "nr_requests"); got != "128" {
		t.Errorf("nr_requests = %s, want 128", got)
	}
}

func TestDeviceRetriesEBUSY(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"sda": {"scheduler": "[none] bfq"}})
	rec := &recorder{QueueAttrs: fs, failOn: func(_, _ string, try int) error {
		if try <= 2 {
			return syscall.EBUSY
		}
		return nil
	}}
	a := &Applier{FS: rec, Backoff: 1}
	r := a.Apply(context.Background(), plan.Plan{Name: "sda", Changes: []plan.Change{{Attribute: "scheduler", From: "none", To: "bfq"}}})
	if r.Failed() || r.Writes != 3 || r.Outcomes[0].Status != Written {
		t.Fatalf("result %+v, want written after 3 writes", r)
	}
	rec = &recorder{QueueAttrs: fs, failOn: func(_, _ string, _ int) error { return syscall.EBUSY }}
	a = &Applier{FS: rec, Backoff: 1, Retries: 2}
	r = a.Apply(context.Background(), plan.Plan{Name: "sda", Changes: []plan.Change{{Attribute: "scheduler", To: "none"}}})
	if !r.Failed() || r.Writes != 3 {
		t.Fatalf("writes %d failed %v: want 3 tries then failure", r.Writes, r.Failed())
	}
}

func TestSchedulerFailureSkipsItsParameters(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"sda": {"scheduler": "[none] bfq", "read_ahead_kb": "128"}})
	rec := &recorder{QueueAttrs: fs, failOn: func(_, attr string, _ int) error {
		if attr == "scheduler" {
			return syscall.EINVAL
		}
		return nil
	}}
	r := (&Applier{FS: rec}).Apply(context.Background(), plan.Plan{Name: "sda", Changes: []plan.Change{
		{Attribute: "scheduler", To: "bfq"},
		{Attribute: "iosched/slice_idle", To: "0"},
		{Attribute: "read_ahead_kb", From: "128", To: "4096"},
	}})
	got := []Status{r.Outcomes[0].Status, r.Outcomes[1].Status, r.Outcomes[2].Status}
	if fmt.Sprint(got) != fmt.Sprint([]Status{Failed, Failed, Written}) {
		t.Fatalf("statuses %v: the scheduler's parameters must not be written after it failed, the rest must", got)
	}
	if w := rec.writes(); len(w) != 2 || w[1] != "sda read_ahead_kb=4096" {
		t.Fatalf("writes %q", w)
	}
	if !strings.Contains(r.Outcomes[0].Err.Error(), "invalid argument") {
		t.Errorf("error %v does not carry EINVAL", r.Outcomes[0].Err)
	}
}

func TestMismatchReported(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"vda": {"read_ahead_kb": "128"}})
	// The kernel rounds read_ahead_kb to pages: model it by rewriting.
	rec := &recorder{QueueAttrs: fs, failOn: func(name, attr string, _ int) error {
		return nil
	}}
	rounding := &roundingAttrs{recorder: rec}
	r := (&Applier{FS: rounding}).Apply(context.Background(), plan.Plan{Name: "vda", Changes: []plan.Change{{Attribute: "read_ahead_kb", From: "128", To: "130"}}})
	if o := r.Outcomes[0]; o.Status != Mismatch || o.Got != "128" {
		t.Fatalf("outcome %+v, want mismatch with got 128", o)
	}
	if !r.Failed() {
		t.Fatal("a value the kernel did not keep must count as a failure")
	}
}

type roundingAttrs struct{ *recorder }

func (r *roundingAttrs) WriteQueueAttr(name, attr, value string) error {
	var n int
	fmt.Sscan(value, &n)
	return r.recorder.WriteQueueAttr(name, attr, fmt.Sprint(n/4*4))
}

func TestGoneDiskReportedOthersDone(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{
		"loop1": {"scheduler": "[none] mq-deadline", "nr_requests": "128"},
		"loop2": {"scheduler": "[none] mq-deadline", "nr_requests": "128"},
	})
	// loop1 vanishes after planning.
	if err := os.RemoveAll(filepath.Join(fs.Root(), "block", "loop1")); err != nil {
		t.Fatal(err)
	}
	changes := []plan.Change{{Attribute: "scheduler", From: "none", To: "mq-deadline"}, {Attribute: "nr_requests", From: "128", To: "64"}}
	rs := (&Applier{FS: fs}).All(context.Background(), []plan.Plan{{Name: "loop1", Changes: changes}, {Name: "loop2", Changes: changes}})
	if !rs[0].Gone || !rs[0].Failed() {
		t.Errorf("loop1: %+v, want gone", rs[0])
	}
	if _, err := os.Stat(filepath.Join(fs.Root(), "block", "loop1")); !os.IsNotExist(err) {
		t.Errorf("apply to a vanished disk created files: %v", err)
	}
	if rs[1].Failed() || rs[1].Writes != 2 {
		t.Errorf("loop2: %+v, want both written", rs[1])
	}
	if !sysfs.Gone(rs[0].Outcomes[0].Err) {
		t.Errorf("loop1 error %v is not recognisable as gone", rs[0].Outcomes[0].Err)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"vda": {"scheduler": "none [mq-deadline]"}})
	rec := &recorder{QueueAttrs: fs}
	r := (&Applier{FS: rec, DryRun: true}).Apply(context.Background(), plan.Plan{Name: "vda", Changes: []plan.Change{
		{Attribute: "scheduler", To: "bfq"},
		{Attribute: "iosched/slice_idle", To: "0", After: "scheduler"}, // bfq's: absent until the switch
	}})
	if len(rec.writes()) != 0 || r.Outcomes[0].Status != Planned || r.Outcomes[0].Before != "mq-deadline" {
		t.Fatalf("dry run: writes %q outcome %+v", rec.writes(), r.Outcomes[0])
	}
	if r.Outcomes[1].Status != Planned || r.Failed() {
		t.Fatalf("dry run: a value after an unmade switch must be planned, not read: %+v", r.Outcomes[1])
	}
}

func TestSchedulerNotKeptSkipsItsParameters(t *testing.T) {
	t.Parallel()
	fs := fakeTree(t, map[string]map[string]string{"sda": {"scheduler": "[mq-deadline] bfq"}})
	rec := &recorder{QueueAttrs: fs}
	keeps := &keepingAttrs{recorder: rec}
	r := (&Applier{FS: keeps}).Apply(context.Background(), plan.Plan{Name: "sda", Changes: []plan.Change{
		{Attribute: "scheduler", From: "mq-deadline", To: "bfq"},
		{Attribute: "iosched/slice_idle", To: "0", After: "scheduler"},
	}})
	if r.Outcomes[0].Status != Mismatch || r.Outcomes[1].Status != Failed || len(rec.writes()) != 1 {
		t.Fatalf("outcomes %+v writes %q", r.Outcomes, rec.writes())
	}
}

// keepingAttrs models a kernel that accepts a scheduler write but keeps
// the old scheduler.
type keepingAttrs struct{ *recorder }

func (k *keepingAttrs) WriteQueueAttr(name, attr, value string) error {
	if attr == "scheduler" {
		return k.recorder.WriteQueueAttr(name, attr, "mq-deadline")
	}
	return k.recorder.WriteQueueAttr(name, attr, value)
}

func TestAllRunsDisksConcurrently(t *testing.T) {
	t.Parallel()
	const n = 8
	disks := map[string]map[string]string{}
	var plans []plan.Plan
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("loop%d", i)
		disks[name] = map[string]string{"scheduler": "[none] mq-deadline"}
		plans = append(plans, plan.Plan{Name: name, Changes: []plan.Change{{Attribute: "scheduler", To: "mq-deadline"}}})
	}
	fs := fakeTree(t, disks)
	// Every write blocks until all n are in flight at once: a sequential
	// applier would deadlock, and the test time out.
	var arrived sync.WaitGroup
	arrived.Add(n)
	rec := &recorder{QueueAttrs: fs, failOn: func(string, string, int) error {
		arrived.Done()
		arrived.Wait()
		return nil
	}}
	done := make(chan []Result)
	go func() { done <- (&Applier{FS: rec, Parallel: n}).All(context.Background(), plans) }()
	var rs []Result
	select {
	case rs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writes to different disks did not run at once")
	}
	for _, r := range rs {
		if r.Failed() {
			t.Fatalf("%+v", r)
		}
	}
}
