// Package uevent hears the kernel's (or udevd's) news of block disks: the
// netlink socket and its sender check, the parsers of both message formats
// (reading only what the daemon uses, in place), a Monitor that owns the
// socket and never stops listening (lost events are reported, a broken
// socket reopened), and the checks that tell whether udevd's events can
// arrive at all: a private network namespace, a udevd that does not answer.
package uevent
