package cli

import (
	"github.com/iosched/iosched/internal/sysfs"
)

// noWaitSlowPath is what advise says of a disk whose driver takes no
// NOWAIT I/O: io_uring submits a read or write with REQ_NOWAIT, and a
// driver without it makes the block layer refuse every one, which
// io_uring then re-issues from its io-wq worker threads.
const noWaitSlowPath = "no NOWAIT support: io_uring cannot submit a read or write to it without blocking, " +
	"so it hands every one to its io-wq worker threads (iou-wrk-PID), a slower path than a NOWAIT-capable disk's"

// noWaitFiller tests a disk's NOWAIT support as list and explain do.
type noWaitFiller interface{ Fill(*sysfs.Device) }

// testNoWait sets whether the disk's driver takes NOWAIT I/O, and the
// note that says what it means when it does not, or why it is unknown.
// The test reads no data (see devnode.NoWait).
func (r *adviceRow) testNoWait(fs sysfs.FS, nodes noWaitFiller) {
	dev, err := fs.DeviceFacts(r.Name, sysfs.FactIdentity)
	if err != nil {
		r.NoWaitNote = "NOWAIT not tested: " + err.Error()
		return
	}
	nodes.Fill(dev)
	r.NoWait = dev.NoWait
	switch {
	case dev.NoWait == nil:
		r.NoWaitNote = "NOWAIT not tested: " + dev.NoWaitReason
	case !*dev.NoWait:
		r.NoWaitNote = noWaitSlowPath
	}
}
