package daemon

import (
	"slices"
	"sync"

	"github.com/iosched/iosched/internal/apply"
)

// write is one attribute a pass wrote to a disk.
type write struct{ Disk, Attr, Value string }

// writeRecorder records what the daemon's passes write (hooks.passTarget),
// so tests assert on what would reach the kernel rather than on the log.
type writeRecorder struct {
	mu     sync.Mutex
	writes []write
}

// record is a Config modifier that makes rec see every pass's writes.
func (rec *writeRecorder) record(c *Config) {
	c.hooks.passTarget = func(q apply.QueueAttrs) apply.QueueAttrs { return recordingAttrs{q, rec} }
}

// of lists the writes to disk, in order; attr "" means every attribute.
func (rec *writeRecorder) of(disk, attr string) []write {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(rec.writes), func(w write) bool {
		return w.Disk != disk || attr != "" && w.Attr != attr
	})
}

// count is how many writes of attr ("" any) were made to any disk.
func (rec *writeRecorder) count(attr string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := 0
	for _, w := range rec.writes {
		if attr == "" || w.Attr == attr {
			n++
		}
	}
	return n
}

type recordingAttrs struct {
	apply.QueueAttrs
	rec *writeRecorder
}

func (a recordingAttrs) WriteQueueAttr(name, attr, value string) error {
	a.rec.mu.Lock()
	a.rec.writes = append(a.rec.writes, write{name, attr, value})
	a.rec.mu.Unlock()
	return a.QueueAttrs.WriteQueueAttr(name, attr, value)
}
