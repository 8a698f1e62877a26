package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/iosched/iosched/internal/atomicfile"
)

// Run writes the file when something was recorded, at most once an
// Interval, until ctx is done; then once more if something is left
// unwritten. While nothing is recorded it sleeps: no timer wakes an idle
// daemon. The file is replaced atomically (written beside it, then renamed
// over it), so node_exporter never reads half of one. A failed write is
// tried again an Interval later, and kept for WriteError.
func (r *Recorder) Run(ctx context.Context) {
	r.mark() // the file is written at once, zeros and all
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			r.flush()
			return
		case <-r.wake:
		}
		if wait := time.Until(last.Add(r.opts.Interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				r.flush()
				return
			case <-t.C:
			}
		}
		r.flush()
		last = time.Now()
	}
}

// flush writes the file if something was recorded since the last write.
func (r *Recorder) flush() {
	if !r.pending.Swap(false) {
		return
	}
	// Records from here on mark the file out of date again: they may or
	// may not make it into this write.
	r.mu.Lock()
	path := r.path
	r.mu.Unlock()
	if path == "" {
		r.mu.Lock()
		r.flushes++
		r.mu.Unlock()
		return
	}
	err := writeFile(path, r.exposition())
	if err != nil {
		err = fmt.Errorf("writing metrics to %s: %w", path, err)
		r.mark() // try again
	}
	r.mu.Lock()
	r.writeErr = err
	if err == nil {
		r.writeCount++
	}
	r.flushes++
	r.mu.Unlock()
}

// SetPath changes the file written (a reloaded policy's metrics_file); ""
// stops writing. The old file is left as it is.
func (r *Recorder) SetPath(path string) {
	r.mu.Lock()
	changed := path != r.path
	r.path = path
	if path == "" {
		r.writeErr = nil
	}
	r.mu.Unlock()
	if changed {
		r.mark()
	}
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

// writeFile replaces path with b atomically (see atomicfile: the
// temporary name ends in digits, so node_exporter's collector, which reads
// only *.prom, skips it). The directory is not created: it is
// node_exporter's, and a missing one is an error to report.
func writeFile(path string, b []byte) error {
	return atomicfile.WriteWith(path, b, atomicfile.Options{NoMkdir: true})
}
