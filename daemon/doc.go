// Package daemon keeps every disk on its policy for as long as it runs: it
// scans all disks at start, then follows kernel (or udevd) uevents, repairs
// drift on a timer, re-plans on SIGHUP, and reports to systemd, the journal
// and a state file that `iosched status` reads. Disks are handled in
// parallel, each disk's passes one at a time, a burst of events for one disk
// coalesced into one more pass.
package daemon
