package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Run writes the file every Interval when something was recorded since the
// last write, until ctx is done; then once more if something is left
// unwritten. The file is replaced atomically (written aside, then renamed
// over it), so node_exporter never reads half of it. A failed write is
// tried again at the next tick, and kept for WriteError. With no Path it
// only waits for ctx.
func (r *Recorder) Run(ctx context.Context) {
	if r.opts.Path == "" {
		<-ctx.Done()
		return
	}
	r.changed.Store(true) // the first tick writes the file, zeros and all
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.flush()
			return
		case <-t.C:
			r.flush()
		}
	}
}

// flush writes the file if something changed since the last write.
func (r *Recorder) flush() {
	if !r.changed.Swap(false) {
		return
	}
	err := prometheus.WriteToTextfile(r.opts.Path, r.reg)
	if err != nil {
		err = fmt.Errorf("writing metrics to %s: %w", r.opts.Path, err)
		r.changed.Store(true) // try again at the next tick
	}
	r.mu.Lock()
	r.writeErr = err
	if err == nil {
		r.writeCount++
	}
	r.mu.Unlock()
}

// WriteError is the last write's failure, nil once a write succeeds: for
// the daemon's status and log.
func (r *Recorder) WriteError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeErr
}

// Writes counts the files written so far.
func (r *Recorder) Writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeCount
}

// Gatherer exposes the registry, for a test or an HTTP handler.
func (r *Recorder) Gatherer() prometheus.Gatherer { return r.reg }
