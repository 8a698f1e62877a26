// Package daemon keeps every disk on its policy for as long as it runs: it
// scans all disks at start, then follows kernel (or udevd) uevents, repairs
// drift on a timer, re-plans on SIGHUP, and reports to systemd, the journal
// and a state file that `iosched status` reads.
//
// The loop is Daemon.Run (run.go, loop.go): nothing on it blocks; scans,
// policy loads and passes run on goroutines Run waits for before it returns.
// A uevent kicks a pass over its disk (pass.go: read, evaluate, plan, apply)
// through a queue (package internal/tasks) that runs different disks in
// parallel and one disk's passes one at a time, coalescing a burst of events
// into one more pass; job.go says what is owed to a disk and how asks merge.
// The uevents come from package uevent's monitors, which run with the policy
// follower and the metrics writer as tasks under one owner (package
// internal/tasks); udevdfollower.go follows udevd in kernel mode, and
// udevfollow.go says what the daemon does with it. What the daemon records
// for the state file is in state.go and statereport.go (the daemon-wide
// report and a disk's state after a pass; the schema is package
// statefile's), systemd's notify messages in notify.go, the runtime
// directory's lock in package internal/disklock; package restore keeps and
// puts back the original values of restore_on_exit. The probes [rule.probe]
// asks for are in probe.go, the adaptive rules' sampling and switches
// ([rule.adapt]) in adapt.go, and the observe key's sampling in
// observe.go.
//
// Each disk has one record (disk, pass.go): what its passes remember, and
// what runs or is kept for it beside them (its probe, adaptive controller
// and observer, its refusals); one teardown of the record ends them all,
// whether the disk went away, another took its name, no rule matches it
// any more, or the daemon stops. The record's doc comment gives the order
// in which the daemon takes its locks.
package daemon
