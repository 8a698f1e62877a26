// Package applytest records what would reach the kernel: every write an
// apply.Applier (or anything else writing through apply.QueueAttrs) makes
// to a disk's queue attributes, in order, with its result. Tests diff the
// recorded sequence against the one they expect instead of reading a log.
package applytest

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/iosched/iosched/internal/apply"
)

// Write is one write to a disk's queue attribute.
type Write struct {
	Disk, Attr, Value string
	// Err is the write's failure as the kernel gave it, "" when the write
	// was made (what was read back after it is not a write's result).
	Err string
}

func (w Write) String() string {
	s := fmt.Sprintf("%s %s=%q", w.Disk, w.Attr, w.Value)
	if w.Err != "" {
		s += " error: " + w.Err
	}
	return s
}

// W is the Write of value to disk's attr that succeeded.
func W(disk, attr, value string) Write { return Write{Disk: disk, Attr: attr, Value: value} }

// Recorder records writes made through the QueueAttrs it wraps. Its zero
// value is ready to use; it is safe for concurrent use, as an Applier
// writes disks concurrently.
type Recorder struct {
	mu     sync.Mutex
	writes []Write
}

// Wrap is attrs with every write recorded in r. Reads and Exists pass
// through unrecorded. A write and its read back go through one open file
// when attrs allows it (apply.WriteReader), as they would unwrapped.
func (r *Recorder) Wrap(attrs apply.QueueAttrs) apply.QueueAttrs { return recording{attrs, r} }

func (r *Recorder) add(w Write) {
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
}

// Len is how many writes were recorded so far: a mark for Since.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

// Writes is every write recorded, in the order they were made.
func (r *Recorder) Writes() []Write { return r.Since(0) }

// Since is the writes recorded after the first mark ones.
func (r *Recorder) Since(mark int) []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes[min(mark, len(r.writes)):])
}

// Of is the writes to disk, in order; attr "" means every attribute.
func (r *Recorder) Of(disk, attr string) []Write {
	return slices.DeleteFunc(r.Writes(), func(w Write) bool {
		return w.Disk != disk || attr != "" && w.Attr != attr
	})
}

// Diff is "" when got and want are the same sequence, else both, one
// write a line, each line marked where they differ.
func Diff(got, want []Write) string {
	if slices.Equal(got, want) {
		return ""
	}
	var b strings.Builder
	b.WriteString("writes (-want +got):\n")
	for i := range max(len(got), len(want)) {
		switch {
		case i < len(got) && i < len(want) && got[i] == want[i]:
			fmt.Fprintf(&b, "   %s\n", got[i])
		default:
			if i < len(want) {
				fmt.Fprintf(&b, " - %s\n", want[i])
			}
			if i < len(got) {
				fmt.Fprintf(&b, " + %s\n", got[i])
			}
		}
	}
	return b.String()
}

type recording struct {
	attrs apply.QueueAttrs
	rec   *Recorder
}

func (q recording) ReadQueueAttr(name, attr string) (string, error) {
	return q.attrs.ReadQueueAttr(name, attr)
}

func (q recording) Exists(name string) bool { return q.attrs.Exists(name) }

func (q recording) WriteQueueAttr(name, attr, value string) error {
	err := q.attrs.WriteQueueAttr(name, attr, value)
	q.rec.add(Write{name, attr, value, errText(err)})
	return err
}

func (q recording) WriteReadQueueAttr(name, attr, value string) (string, bool, error) {
	if wr, ok := q.attrs.(apply.WriteReader); ok {
		got, written, err := wr.WriteReadQueueAttr(name, attr, value)
		w := Write{Disk: name, Attr: attr, Value: value}
		if !written {
			w.Err = errText(err)
		}
		q.rec.add(w)
		return got, written, err
	}
	if err := q.WriteQueueAttr(name, attr, value); err != nil {
		return "", false, err
	}
	got, err := q.attrs.ReadQueueAttr(name, attr)
	return got, true, err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var _ apply.WriteReader = recording{}
