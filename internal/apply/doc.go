// Package apply carries out plans: disks concurrently (the RCU grace periods
// behind scheduler switches overlap, so N disks cost about one), one disk's
// writes in plan order. Every value is read before it is written (from the
// snapshot the plan was made from moments before, and again after a scheduler
// switch, which resets what the old scheduler owned), so a write that changes
// nothing is never made, and read back after it.
package apply
