package metrics_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/metrics"
)

// The daemon's side: one recorder, its writer running beside the event
// loop, counts from the passes.
func Example() {
	dir, _ := os.MkdirTemp("", "metrics-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "iosched.prom")

	rec := metrics.New(metrics.Options{Path: path, Version: "v1.0.0"})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rec.Run(ctx); close(done) }()

	received := time.Now() // when the disk's uevent was read
	rec.Uevent("add", "kernel")
	rec.Changed("scheduler", "virtio: none", false)
	rec.Applied(received)
	rec.SetDisks(map[metrics.DiskKind]int{{Class: "virtio", Scheduler: "none"}: 1})

	stop()
	<-done
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "iosched_changes_total") || strings.HasPrefix(line, "iosched_disks_managed") {
			fmt.Println(line)
		}
	}
	// Output:
	// iosched_changes_total{attribute="scheduler",rule="virtio: none"} 1
	// iosched_disks_managed{class="virtio",scheduler="none"} 1
}
