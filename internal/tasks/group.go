// Package tasks owns a process's goroutines beside its main loop.
//
// A Group runs long-running tasks and one-off jobs under one context, ready
// when every task is, stopped and waited for with one bound (corerad's Task
// pattern over an errgroup). A Queue runs work owed to named things (a
// daemon's disks): different names in parallel, up to a bound, one name's
// passes one after another and never two at once. Writes records the writes
// to a disk's settings that run on a goroutine of their own because nobody
// can wait for them to return.
package tasks

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Task is a long-running part of a daemon beside its event loop (the
// uevent monitors, the policy follower, the metrics writer): it runs until
// ctx is done, and is Ready once it does its job. An error it returns
// reaches the owner through Group.Failed.
type Task interface {
	String() string
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// funcTask is a Task whose work was set up before it started (a socket,
// an inotify instance opened): ready as soon as it runs.
type funcTask struct {
	name  string
	run   func(ctx context.Context) error
	ready chan struct{}
}

// Func is a Task named name that runs run, ready as soon as it runs: for
// work set up before it started (a socket, an inotify instance opened).
func Func(name string, run func(ctx context.Context) error) Task {
	return &funcTask{name: name, run: run, ready: make(chan struct{})}
}

func (t *funcTask) String() string         { return t.name }
func (t *funcTask) Ready() <-chan struct{} { return t.ready }
func (t *funcTask) Run(ctx context.Context) error {
	close(t.ready)
	return t.run(ctx)
}

// Group owns the goroutines it starts: the long-running tasks and the
// one-off jobs (a scan, a policy load, a probe, the thread release). All
// get one context, derived from the parent given to New; the first task to
// fail is reported on Failed (errgroup's rule: the owner stops); Stop ends
// them all and waits with one bound. Start and Stop are the owner's to
// call; Do may be called from any goroutine, until Stop.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan error // the first task's error

	mu      sync.Mutex
	running map[string]int // what has not returned yet, by name
	readies []<-chan struct{}
	// ended is closed (and replaced) whenever a goroutine returns, for
	// WaitFor.
	ended chan struct{}
}

// New returns a Group whose goroutines get a context derived from parent.
func NewGroup(parent context.Context) *Group {
	ctx, cancel := context.WithCancel(parent)
	return &Group{ctx: ctx, cancel: cancel, failed: make(chan error, 1), running: map[string]int{}, ended: make(chan struct{})}
}

// Start runs t until Stop.
func (g *Group) Start(t Task) {
	g.mu.Lock()
	g.readies = append(g.readies, t.Ready())
	g.mu.Unlock()
	g.Do(t.String(), func(ctx context.Context) {
		if err := t.Run(ctx); err != nil && ctx.Err() == nil {
			select {
			case g.failed <- fmt.Errorf("%s: %w", t, err):
			default: // the daemon stops for the first already
			}
		}
	})
}

// Do runs a one-off job, which ends early when ctx is done if it can.
func (g *Group) Do(name string, job func(ctx context.Context)) {
	g.mu.Lock()
	g.running[name]++
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() {
			g.mu.Lock()
			if g.running[name]--; g.running[name] == 0 {
				delete(g.running, name)
			}
			close(g.ended)
			g.ended = make(chan struct{})
			g.mu.Unlock()
		}()
		job(g.ctx)
	}()
}

// Ready is closed once every task started so far is ready.
func (g *Group) Ready() <-chan struct{} {
	g.mu.Lock()
	readies := slices.Clone(g.readies)
	g.mu.Unlock()
	out := make(chan struct{})
	g.Do("readiness", func(ctx context.Context) {
		for _, r := range readies {
			select {
			case <-r:
			case <-ctx.Done():
				return
			}
		}
		close(out)
	})
	return out
}

// Stop cancels the tasks' context and waits for every goroutine, at most
// bound, returning the names of those still running then.
func (g *Group) Stop(bound time.Duration) []string {
	g.cancel()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		g.mu.Lock()
		defer g.mu.Unlock()
		return slices.Sorted(maps.Keys(g.running))
	}
}

// Failed delivers the first error a task returned before Stop.
func (g *Group) Failed() <-chan error { return g.failed }

// WaitFor waits, at most bound, until no goroutine whose name match
// accepts runs, and returns the names of those still running then. It
// cancels nothing: the caller has asked them to end (the daemon's probes,
// each cancelled on its own, must have restored their disks before the
// stop restores the originals).
func (g *Group) WaitFor(bound time.Duration, match func(name string) bool) (left []string) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		g.mu.Lock()
		left = nil
		for name := range g.running {
			if match(name) {
				left = append(left, name)
			}
		}
		ended := g.ended
		g.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ended:
		case <-t.C:
			slices.Sort(left)
			return left
		}
	}
}
