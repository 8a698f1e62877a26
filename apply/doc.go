// Package apply carries out plans: disks concurrently (the RCU grace periods
// behind scheduler switches overlap, so N disks cost about one), one disk's
// writes in plan order, every value re-read just before it is written so a
// write that changes nothing is never made.
package apply
