package daemon

import (
	"time"

	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
	"github.com/iosched/iosched/internal/uevent"
)

// passKind says how much of a disk a pass reads.
type passKind int

const (
	// settingsOnly re-reads only the attributes the policy sets (and
	// writes those that drifted), trusting the facts (class, size, ...)
	// from the last full read: drift repair and re-planning after a
	// reload. Facts change only with a uevent.
	settingsOnly passKind = iota
	// full reads the whole disk afresh: a uevent, the first scan, a rescan
	// after lost events.
	full
)

// removal forgets a disk that sysfs says is gone. A "remove" uevent alone
// proves nothing: anyone can ask the kernel for one (`udevadm trigger
// --action=remove`, a write to the disk's uevent file), and one read late
// (after lost events) may be about the disk's predecessor. So the pass
// checks, and gives a disk still there a full pass instead.
const removal passKind = -1

// job is what is owed to one disk: the strongest kind asked for since its
// last pass started (a removal only when it came last), the newest udev
// properties, the disk's identity from the newest uevent, and who waits for
// it. A removal followed by an event is a full pass: the disk is back, or
// another one has its name, and the pass's read tells which. The queue
// (package internal/tasks) keeps who waits for it, and starts each
// disk's owed work from the zero job: settingsOnly, nothing else known.
type job struct {
	// disk is the disk's name, checked where it entered (its uevent, the
	// scan, or the record of a disk known).
	disk  sysfs.Name
	kind  passKind
	props map[string]string
	// ident is the device number and diskseq the newest uevent gave, so a
	// full pass need not read them; zero when a scan asked too (the scan
	// after lost events must read them afresh).
	ident sysfs.Ident
	// devpath is where the newest uevent says the disk's directory is
	// (uevent.Event.DevPath); "" when a scan asked too.
	devpath string
	// afterUdev: asked for by udevd's processed event; kernelEvent: by
	// the kernel's uevent (udevfollow.go).
	afterUdev, kernelEvent bool
	// received is when the oldest uevent this pass answers arrived
	// (zero: none did), for the event-to-applied latency.
	received time.Time
}

func (j *job) merge(kind passKind, ev *uevent.Event) {
	// The newer of a removal and an event wins.
	switch {
	case kind == removal:
		j.kind = removal
	case j.kind == removal && kind == full:
		j.kind = full
	case j.kind != removal:
		j.kind = max(j.kind, kind)
	}
	switch {
	case ev == nil:
		j.ident, j.devpath = sysfs.Ident{}, ""
	case ev.Props != nil:
		j.props = ev.Props
		fallthrough
	default:
		j.ident, j.devpath = ev.Ident, ev.DevPath
	}
	if ev != nil && !ev.UdevDone && !ev.At.IsZero() && (j.received.IsZero() || ev.At.Before(j.received)) {
		j.received = ev.At
	}
	j.afterUdev = j.afterUdev || ev != nil && ev.UdevDone
	j.kernelEvent = j.kernelEvent || ev != nil && !ev.UdevDone
}

// kick asks the queue for a pass over name, for the uevent ev (nil: a
// scan). wg, when set, is done once a pass that started after this call
// has finished.
func (d *Daemon) kick(name sysfs.Name, kind passKind, ev *uevent.Event, wg *tasks.Barrier) {
	d.queue.Kick(name.String(), wg, func(j *job) {
		j.disk = name
		j.merge(kind, ev)
		if d.cfg.hooks.owed != nil {
			d.cfg.hooks.owed(name.String(), *j)
		}
	})
}
