package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// Status is what happened to one planned change.
type Status string

const (
	// Written: the value was written and read back as asked.
	Written Status = "written"
	// Unchanged: the value was already in place when re-read; no write.
	Unchanged Status = "unchanged"
	// Mismatch: written, but the kernel kept another value (Got).
	Mismatch Status = "mismatch"
	// Failed: the write failed (Err), or was not attempted because an
	// earlier one it depends on failed.
	Failed Status = "failed"
	// Planned: a dry run; nothing was written.
	Planned Status = "planned"
)

// Outcome is the fate of one change.
type Outcome struct {
	plan.Change
	Status Status `json:"status"`
	// Before is the value re-read just before writing.
	Before string `json:"before"`
	// Got is the value read back after writing.
	Got string `json:"got,omitempty"`
	Err error  `json:"-"`
}

// Result is what apply did to one disk.
type Result struct {
	Device   string    `json:"name"`
	Outcomes []Outcome `json:"outcomes"`
	// Gone is set when the disk disappeared during the apply.
	Gone bool `json:"gone,omitempty"`
	// Writes counts write(2) calls made, retries included.
	Writes int `json:"writes"`
}

// Failed reports whether any change failed or was not kept.
func (r *Result) Failed() bool {
	if r.Gone {
		return true
	}
	for _, o := range r.Outcomes {
		if o.Status == Failed || o.Status == Mismatch {
			return true
		}
	}
	return false
}

// QueueAttrs is where an Applier reads and writes disks' queue
// attributes: a sysfs.FS, or in tests a recorder around one.
type QueueAttrs interface {
	ReadQueueAttr(name, attr string) (string, error)
	WriteQueueAttr(name, attr, value string) error
	Exists(name string) bool
}

// WriteReader is a QueueAttrs that can also write an attribute and read it
// back through one open file, one lookup of its path where a write and a
// read take two (sysfs.FS can). written reports whether the write was
// made; err is then the read's failure.
type WriteReader interface {
	WriteReadQueueAttr(name, attr, value string) (got string, written bool, err error)
}

// Queue is one disk's queue attributes, where an Applier writes one plan:
// a *sysfs.Disk (the disk's directory held open, so writes reach that
// disk or fail), or a QueueAttrs seen for one disk (QueueOf).
type Queue interface {
	ReadQueueAttr(attr string) (string, error)
	// WriteReadQueueAttr writes the attribute and reads back what the
	// kernel kept; written reports whether the write was made, err is
	// then the read's failure.
	WriteReadQueueAttr(attr, value string) (got string, written bool, err error)
	// Exists reports whether the disk is still there.
	Exists() bool
}

var (
	_ QueueAttrs  = sysfs.FS{}
	_ WriteReader = sysfs.FS{}
	_ Queue       = (*sysfs.Disk)(nil)
	_ Queue       = sysfs.Queue{}
)

// QueueOf is the queue of the disk name in attrs: through one open file
// a write and its read back when attrs is a WriteReader, else a write,
// then a read.
func QueueOf(attrs QueueAttrs, name string) Queue { return namedQueue{attrs, name} }

type namedQueue struct {
	attrs QueueAttrs
	name  string
}

func (q namedQueue) ReadQueueAttr(attr string) (string, error) {
	return q.attrs.ReadQueueAttr(q.name, attr)
}

func (q namedQueue) WriteReadQueueAttr(attr, value string) (string, bool, error) {
	if wr, ok := q.attrs.(WriteReader); ok {
		return wr.WriteReadQueueAttr(q.name, attr, value)
	}
	if err := q.attrs.WriteQueueAttr(q.name, attr, value); err != nil {
		return "", false, err
	}
	got, err := q.attrs.ReadQueueAttr(q.name, attr)
	return got, true, err
}

func (q namedQueue) Exists() bool { return q.attrs.Exists(q.name) }

// AttrsOf is q as the QueueAttrs of the disk name, which q must be: what
// wraps a QueueAttrs (a recorder in tests) can wrap one disk's queue.
// Another name is refused.
func AttrsOf(q Queue, name string) QueueAttrs { return queueAttrs{q, name} }

type queueAttrs struct {
	q    Queue
	name string
}

func (a queueAttrs) check(name string) error {
	if name != a.name {
		return fmt.Errorf("%s: not the disk held (%s)", name, a.name)
	}
	return nil
}

func (a queueAttrs) ReadQueueAttr(name, attr string) (string, error) {
	if err := a.check(name); err != nil {
		return "", err
	}
	return a.q.ReadQueueAttr(attr)
}

func (a queueAttrs) WriteQueueAttr(name, attr, value string) error {
	if err := a.check(name); err != nil {
		return err
	}
	_, written, err := a.q.WriteReadQueueAttr(attr, value)
	if written {
		return nil // the read back is not asked for
	}
	return err
}

func (a queueAttrs) WriteReadQueueAttr(name, attr, value string) (string, bool, error) {
	if err := a.check(name); err != nil {
		return "", false, err
	}
	return a.q.WriteReadQueueAttr(attr, value)
}

func (a queueAttrs) Exists(name string) bool { return name == a.name && a.q.Exists() }

// Applier writes plans to one sysfs tree.
type Applier struct {
	FS QueueAttrs
	// Retries is how many times an EBUSY write is tried again (default 3),
	// waiting Backoff, then twice as long, between tries (default 10ms).
	Retries int
	Backoff time.Duration
	// Parallel bounds how many disks are written at once (default 512):
	// each blocked write holds an OS thread while the kernel waits for its
	// grace period, so the bound caps threads and memory, while 512 already
	// overlaps nearly all the waiting (contrib/bench/README.md has the
	// figures).
	Parallel int
	// DryRun writes nothing: each change is reported as Planned, after
	// reading again the values the plan could not know.
	DryRun bool
}

func (a *Applier) retries() int {
	if a.Retries <= 0 {
		return 3
	}
	return a.Retries
}

func (a *Applier) backoff() time.Duration {
	if a.Backoff <= 0 {
		return 10 * time.Millisecond
	}
	return a.Backoff
}

// All applies every plan, disks concurrently up to Parallel, and returns the
// results in the order of plans. Plans with no changes cost nothing.
func (a *Applier) All(ctx context.Context, plans []plan.Plan) []Result {
	results := make([]Result, len(plans))
	for r := range a.Each(ctx, plans) {
		results[r.Index] = r.Result
	}
	return results
}

// Indexed is the result of plans[Index].
type Indexed struct {
	Index int
	Result
}

// Each applies every plan as All does and sends each disk's result as soon
// as the disk is done; the channel is closed when all are. A caller that
// must not wait for ever (a write to a queue frozen behind a disk that does
// not answer blocks until the disk does) can stop reading: the channel has
// room for every result, so no writer waits for it.
func (a *Applier) Each(ctx context.Context, plans []plan.Plan) <-chan Indexed {
	out := make(chan Indexed, len(plans))
	limit := a.Parallel
	if limit <= 0 {
		limit = 512
	}
	go func() {
		defer close(out)
		sem := make(chan struct{}, limit)
		var wg sync.WaitGroup
		for i := range plans {
			if plans[i].Empty() {
				out <- Indexed{i, Result{Device: plans[i].Name, Outcomes: []Outcome{}}}
				continue
			}
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				out <- Indexed{i, a.Apply(ctx, plans[i])}
			}(i)
		}
		wg.Wait()
	}()
	return out
}

// Apply applies one disk's plan, its changes in order. A scheduler that
// could not be switched (or was not kept) leaves its iosched/* parameters
// unwritten: they would land on the wrong scheduler. A disk that went away
// stops the rest.
func (a *Applier) Apply(ctx context.Context, p plan.Plan) Result {
	return a.ApplyTo(ctx, QueueOf(a.FS, p.Name), p)
}

// ApplyTo is Apply through q, the queue of the plan's disk.
func (a *Applier) ApplyTo(ctx context.Context, q Queue, p plan.Plan) Result {
	r := Result{Device: p.Name, Outcomes: make([]Outcome, 0, len(p.Changes))}
	schedulerFailed := false
	var written []sysfs.Attr
	for _, c := range p.Changes {
		o := Outcome{Change: c}
		attr := sysfs.Attr(c.Attribute)
		switch {
		case r.Gone:
			o.Status, o.Err = Failed, fmt.Errorf("the disk went away")
		case schedulerFailed && attr.Kind() == sysfs.KindParam:
			o.Status, o.Err = Failed, fmt.Errorf("not written: the scheduler was not switched")
		case ctx.Err() != nil:
			o.Status, o.Err = Failed, ctx.Err()
		default:
			// The plan's From was read from a snapshot taken just before;
			// a value an earlier write of this pass may have reset
			// (sysfs.Attr.Resets), or one the plan could not know, is
			// read again.
			reread := c.From == "" || slices.ContainsFunc(written, func(w sysfs.Attr) bool { return w.Resets(attr) })
			a.change(ctx, q, &o, &r, reread)
		}
		if o.Status == Written || o.Status == Mismatch {
			written = append(written, attr)
		}
		if attr.Kind() == sysfs.KindScheduler {
			schedulerFailed = o.Status == Failed || o.Status == Mismatch
		}
		r.Outcomes = append(r.Outcomes, o)
	}
	return r
}

// change makes one change: read the current value (when reread, else trust
// the plan's), skip the write when it is already in place, write with EBUSY
// retries, read back.
func (a *Applier) change(ctx context.Context, q Queue, o *Outcome, r *Result, reread bool) {
	before := o.From
	if a.DryRun && o.After != "" {
		// The write it waits for is not made in a dry run: what the
		// kernel would then show is unknown.
		o.Status = Planned
		return
	}
	if reread {
		var err error
		if before, err = q.ReadQueueAttr(o.Attribute); err != nil {
			o.Status, o.Err = Failed, err
			r.Gone = sysfs.Gone(err) && !q.Exists()
			return
		}
	}
	o.Before = before
	if before == o.To {
		o.Status = Unchanged
		return
	}
	if a.DryRun {
		o.Status = Planned
		return
	}
	wait := a.backoff()
	var (
		got     string
		written bool
		err     error
	)
	for try := 0; ; try++ {
		r.Writes++
		got, written, err = q.WriteReadQueueAttr(o.Attribute, o.To)
		if written || !errors.Is(err, syscall.EBUSY) || try >= a.retries() {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%w (while retrying after EBUSY)", ctx.Err())
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			break
		}
		wait *= 2
	}
	if err != nil && !written {
		o.Status, o.Err = Failed, err
		r.Gone = sysfs.Gone(err) && !q.Exists()
		return
	}
	switch {
	case err != nil:
		o.Status, o.Err = Failed, fmt.Errorf("written, but reading it back: %w", err)
		r.Gone = sysfs.Gone(err) && !q.Exists()
	case got != o.To:
		o.Status, o.Got = Mismatch, got
		o.Err = fmt.Errorf("the kernel kept %q", got)
	default:
		o.Status, o.Got = Written, got
	}
}
