package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iosched/iosched/internal/fileio"
)

// Run writes the file when something was recorded, at most once an
// Interval, until ctx is done; then once more if something is left
// unwritten, or, with Options.RemoveAtEnd, removes it. While nothing is
// recorded it sleeps: no timer wakes an idle daemon. The file is replaced atomically (written beside it, then renamed
// over it), so node_exporter never reads half of one. A failed write is
// tried again an Interval later, and kept for WriteError.
func (r *Recorder) Run(ctx context.Context) {
	r.mark() // the file is written at once, zeros and all
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			r.end()
			return
		case <-r.wake:
		}
		if wait := time.Until(last.Add(r.opts.Interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				r.end()
				return
			case <-t.C:
			}
		}
		r.flush()
		last = time.Now()
	}
}

// end is Run's last step: the last write, or the file's removal.
func (r *Recorder) end() {
	if !r.opts.RemoveAtEnd {
		r.flush()
		return
	}
	r.mu.Lock()
	old := r.written
	r.mu.Unlock()
	r.removeOld(old, "the daemon stops")
}

// flush writes the file if something was recorded since the last write,
// having removed the one written before if the path moved.
func (r *Recorder) flush() {
	if !r.pending.Swap(false) {
		return
	}
	// Records from here on mark the file out of date again: they may or
	// may not make it into this write.
	r.mu.Lock()
	path, old := r.path, r.written
	r.mu.Unlock()
	if old != "" && old != path {
		r.removeOld(old, "metrics_file moved or unset")
	}
	if path == "" {
		return
	}
	r.out = r.appendExposition(r.out)
	err := writeFile(path, r.out)
	if err != nil {
		err = fmt.Errorf("writing metrics to %s: %w", path, err)
		r.mark() // try again
	}
	r.mu.Lock()
	prev := r.writeErr
	r.writeErr = err
	if err == nil {
		r.written = path
	}
	r.mu.Unlock()
	switch {
	case err != nil && prev == nil: // once a streak of failures (each names its own temporary file)
		r.opts.Log.Error("the metrics file cannot be written; tried again every interval, logged again only once it works", "file", path, "error", err, "interval", r.opts.Interval)
	case err == nil && prev != nil:
		r.opts.Log.Info("the metrics file is written again", "file", path)
	}
}

// removeOld removes the file written before, which no write will update
// any more (why says so), so that its frozen values are not exported as
// current ones.
func (r *Recorder) removeOld(old, why string) {
	if old == "" {
		return
	}
	r.mu.Lock()
	if r.written == old {
		r.written = "" // tried once: a failure is logged once
	}
	r.mu.Unlock()
	if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.opts.Log.Warn("the old metrics file cannot be removed; its values are no longer updated", "file", old, "reason", why, "error", err)
		return
	}
	r.opts.Log.Info("the metrics file removed", "file", old, "reason", why)
}

// SetPath changes the file written (a reloaded policy's metrics_file); ""
// stops writing. The file written before is removed by the writer (Run),
// before its next write.
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

// writeFile replaces path with b atomically (see fileio: the
// temporary name ends in digits, so node_exporter's collector, which reads
// only *.prom, skips it). The directory is not created: it is
// node_exporter's, and a missing one is an error to report.
func writeFile(path string, b []byte) error {
	return fileio.WriteWith(path, b, fileio.Options{NoMkdir: true})
}
