package tasks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// gatedTask is ready when the test says, and runs until its context ends
// or the test makes it fail.
type gatedTask struct {
	name  string
	ready chan struct{}
	fail  chan error
}

func newGatedTask(name string) *gatedTask {
	return &gatedTask{name: name, ready: make(chan struct{}), fail: make(chan error, 1)}
}

func (g *gatedTask) String() string         { return g.name }
func (g *gatedTask) Ready() <-chan struct{} { return g.ready }
func (g *gatedTask) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-g.fail:
		return err
	}
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not within 5 s", what)
	}
}

// Ready comes once every task started is ready, not before.
func TestTasksReadyWhenAllAre(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	defer g.Stop(time.Second)
	a, b := newGatedTask("a"), newGatedTask("b")
	g.Start(a)
	g.Start(b)
	ready := g.Ready()
	close(a.ready)
	select {
	case <-ready:
		t.Fatal("ready with b not ready")
	default:
	}
	close(b.ready)
	within(t, ready, "ready once both are")
}

// A task's error reaches the owner, named after the task (the daemon stops
// on it); an error after the stop began is not a failure.
func TestTasksFailure(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	a := newGatedTask("uevent monitor")
	g.Start(a)
	a.fail <- errors.New("boom")
	select {
	case err := <-g.Failed():
		if err.Error() != "uevent monitor: boom" {
			t.Errorf("failure %q", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failure did not reach the owner")
	}
	if left := g.Stop(time.Second); left != nil {
		t.Errorf("left running: %v", left)
	}
}

// stop ends the tasks through their context and waits for the jobs; one
// that does not end within the bound is named, not waited for.
func TestTasksStop(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	g.Start(newGatedTask("policy follower"))
	stuck, release := make(chan struct{}), make(chan struct{})
	g.Do("policy load", func(context.Context) { close(stuck); <-release })
	<-stuck
	start := time.Now()
	left := g.Stop(100 * time.Millisecond)
	if !slices.Equal(left, []string{"policy load"}) {
		t.Errorf("left running: %v, want the stuck load only", left)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("stop took %s, bound 100ms", took)
	}
	close(release)
	g.wg.Wait()
}

// WaitFor waits for the jobs it is asked about only, and names those
// still running at its bound.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	g := NewGroup(context.Background())
	defer g.Stop(time.Second)
	probing, endProbe := make(chan struct{}), make(chan struct{})
	g.Do("probe vda", func(context.Context) { close(probing); <-endProbe })
	g.Do("policy load", func(ctx context.Context) { <-ctx.Done() })
	<-probing
	isProbe := func(name string) bool { return strings.HasPrefix(name, "probe ") }
	if left := g.WaitFor(50*time.Millisecond, isProbe); !slices.Equal(left, []string{"probe vda"}) {
		t.Errorf("probe running: left %v, want [probe vda]", left)
	}
	close(endProbe)
	if left := g.WaitFor(5*time.Second, isProbe); left != nil {
		t.Errorf("probe ended: left %v (the policy load is not a probe)", left)
	}
}
