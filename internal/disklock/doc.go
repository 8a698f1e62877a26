// Package disklock is the machine's lock of each disk's settings: one byte
// of one file per machine, taken by whoever writes a disk's scheduler or
// tunables (the daemon's passes and its restore at stop, `iosched apply`)
// and held by a probe for its whole run, so that no two of them switch one
// queue at once, whatever state directory each was started with.
package disklock
