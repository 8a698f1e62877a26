// Package safefile reads the files iosched takes as input (policies, the
// state directory's records, seeded probe results, udev rules, tuned
// profiles, the daemon's state file) one safe way: opened without
// blocking, only a regular file, never more than a stated size, and an
// error that names the file. A FIFO, a device node or a link to /dev/zero
// put where such a file is expected is refused instead of hanging the
// process or filling its memory.
package safefile
