package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// What a long-lived caller (the daemon) needs of sysfs between its reads
// and writes goes through here too, so that a disk is read, refreshed and
// found gone one way whoever asks.

// OpenDisk opens a disk's directory for a read followed by writes (see
// sysfs.FS.Open): devpath, when not "", is its directory as
// its uevent names it.
func (p *Pipeline) OpenDisk(name sysfs.Name, devpath string) (*sysfs.Disk, error) {
	return p.FS.Open(name, devpath)
}

// Queue is the disk's queue by its name (sysfs.Queue): what a pass that
// did not open the disk's directory (Refresh) writes through.
func (p *Pipeline) Queue(name sysfs.Name) sysfs.Queue { return p.FS.Queue(name) }

// Names lists the whole disks in the tree (sysfs.FS.Names).
func (p *Pipeline) Names() ([]sysfs.Name, error) { return p.FS.Names() }

// Refresh re-reads into dev the attributes ev sets, and the scheduler when
// a probe decides it (probed), where a full Read would open the disk's
// directory and read its facts: facts stay as last read, as they change
// only with a uevent, which brings a full read. An error for which
// sysfs.Gone holds means the disk is gone; an attribute missing on a disk
// still there is hidden on its queue (or not its scheduler's) and is
// dropped from dev.
func (p *Pipeline) Refresh(q sysfs.Queue, dev *sysfs.Device, ev policy.Evaluation, probed bool) error {
	sched := probed
	for _, s := range ev.Settings {
		sched = sched || sysfs.Attr(s.Attribute).Kind() == sysfs.KindScheduler
	}
	if sched && dev.Scheduler != nil {
		active, offered, err := q.ReadScheduler()
		if err != nil {
			return readError(q, err)
		}
		dev.SetValue(sysfs.Attr("scheduler"), active) // a switch drops the old scheduler's parameters
		dev.Schedulers = offered
	}
	for _, s := range ev.Settings {
		attr := sysfs.Attr(s.Attribute)
		if attr.Kind() == sysfs.KindScheduler {
			continue
		}
		v, err := q.ReadQueueAttr(s.Attribute)
		switch {
		case err == nil:
			dev.SetValue(attr, v)
		case errors.Is(err, fs.ErrNotExist) && q.Exists():
			dev.DeleteValue(attr)
		default:
			return readError(q, err)
		}
	}
	return nil
}

func readError(q sysfs.Queue, err error) error {
	if sysfs.Gone(err) && !q.Exists() {
		return fmt.Errorf("%w: %s", sysfs.ErrNoDevice, q.Name())
	}
	return err
}

// Gone reports whether sysfs says the disk is gone: its directory is, or
// its queue directory, which the kernel removes before it sends the
// disk's "remove" uevent (block/genhd.c, del_gendisk: blk_unregister_queue
// comes before device_del).
func (p *Pipeline) Gone(name sysfs.Name) bool {
	q := p.FS.Queue(name)
	if !q.Exists() {
		return true
	}
	_, err := q.ReadQueueAttr("scheduler")
	return err != nil && sysfs.Gone(err)
}

// StatPath is the disk's stat file, which observers and adaptive
// controllers read.
func (p *Pipeline) StatPath(name sysfs.Name) string {
	return observe.StatPath(p.FS.Root(), name.String())
}

// Identity is what a disk is known by in probe results (its probe key),
// and whether it spins ("1", "0", or "unknown"): read here when dev was
// read without that fact, as a pass reads only what its policy tests.
func (p *Pipeline) Identity(dev *sysfs.Device) (key probe.Key, rotational string) {
	key = probe.KeyOf(p.FS, dev)
	switch {
	case dev.Rotational != nil && *dev.Rotational:
		return key, "1"
	case dev.Rotational != nil:
		return key, "0"
	}
	rotational = "unknown"
	if b, err := fileio.Read(filepath.Join(p.FS.Root(), "block", dev.Name, "queue", "rotational"), 64); err == nil {
		if v := strings.TrimSpace(string(b)); v == "0" || v == "1" {
			rotational = v
		}
	}
	return key, rotational
}
