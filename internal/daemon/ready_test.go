package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/ueventtest"
)

// Ready closes only once the start scan's passes are done: a disk present
// at start has its settings when Ready is closed, and not before.
func TestReadyAfterTheStartScan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.toml")
	writeFile(t, policyPath, testPolicy(""))
	fs := fakeTree(t, "loop20000")
	evaluating := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	d, err := New(Config{PolicyPath: policyPath, FS: fs, StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
		LockFile: filepath.Join(dir, "disks.lock"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Signals: make(chan os.Signal),
		hooks: hooks{dial: newFakeDialer(ueventtest.NewConn()).dial,
			evaluate: func(p *policy.Policy, dev *sysfs.Device, stop func() bool) (policy.Evaluation, bool) {
				select {
				case evaluating <- struct{}{}:
				default:
				}
				<-release
				return p.EvaluateUntil(dev, stop)
			}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	defer free()

	select {
	case <-evaluating: // the start scan's pass has begun, and waits
	case <-time.After(30 * time.Second):
		t.Fatal("the start scan never evaluated loop20000")
	}
	select {
	case <-d.Ready():
		t.Fatal("Ready closed while the start scan's pass was still evaluating")
	default:
	}
	free()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not ready 30 s after the start scan's pass was let go")
	}
	if got := readFake(t, fs, "loop20000", "scheduler"); got != "mq-deadline" {
		t.Errorf("at Ready loop20000 scheduler = %s, want mq-deadline (the start scan done)", got)
	}
}
