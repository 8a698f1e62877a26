package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// task is a long-running part of the daemon beside its event loop (the
// uevent monitors, the policy follower, the metrics writer): it runs until
// ctx is done, and is Ready once it does its job. An error it returns
// stops the daemon.
type task interface {
	String() string
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// funcTask is a task whose work was set up before it started (a socket,
// an inotify instance opened): ready as soon as it runs.
type funcTask struct {
	name  string
	run   func(ctx context.Context) error
	ready chan struct{}
}

func newFuncTask(name string, run func(ctx context.Context) error) *funcTask {
	return &funcTask{name: name, run: run, ready: make(chan struct{})}
}

func (t *funcTask) String() string         { return t.name }
func (t *funcTask) Ready() <-chan struct{} { return t.ready }
func (t *funcTask) Run(ctx context.Context) error {
	close(t.ready)
	return t.run(ctx)
}

// tasks owns every goroutine Run starts beside the passes and probes: the
// long-running tasks and the one-off jobs (a scan, a policy load, the
// thread release). All get one context, derived from Run's; the first task
// to fail stops the daemon (errgroup's rule); stop ends them all and waits
// with one bound. Only Run's goroutine starts and stops them.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	failed chan error // the first task's error

	mu      sync.Mutex
	running map[string]int // what has not returned yet, by name
	readies []<-chan struct{}
}

func newTasks(parent context.Context) *tasks {
	ctx, cancel := context.WithCancel(parent)
	return &tasks{ctx: ctx, cancel: cancel, failed: make(chan error, 1), running: map[string]int{}}
}

// start runs t until stop.
func (g *tasks) start(t task) {
	g.mu.Lock()
	g.readies = append(g.readies, t.Ready())
	g.mu.Unlock()
	g.do(t.String(), func(ctx context.Context) {
		if err := t.Run(ctx); err != nil && ctx.Err() == nil {
			select {
			case g.failed <- fmt.Errorf("%s: %w", t, err):
			default: // the daemon stops for the first already
			}
		}
	})
}

// do runs a one-off job, which ends early when ctx is done if it can.
func (g *tasks) do(name string, job func(ctx context.Context)) {
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
			g.mu.Unlock()
		}()
		job(g.ctx)
	}()
}

// ready is closed once every task started so far is ready.
func (g *tasks) ready() <-chan struct{} {
	g.mu.Lock()
	readies := slices.Clone(g.readies)
	g.mu.Unlock()
	out := make(chan struct{})
	g.do("readiness", func(ctx context.Context) {
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

// stop cancels the tasks' context and waits for every goroutine, at most
// bound, returning the names of those still running then.
func (g *tasks) stop(bound time.Duration) []string {
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
