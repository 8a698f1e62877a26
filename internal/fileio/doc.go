// Package fileio reads and writes the files iosched owns or takes as input.
//
// Reads (policies, the state directory's records, seeded probe results,
// udev rules, tuned profiles, the daemon's state file) go one safe way:
// opened without blocking, only a regular file, never more than a stated
// size, and an error that names the file. A FIFO, a device node or a link to
// /dev/zero put where such a file is expected is refused instead of hanging
// the process or filling its memory.
//
// Writes replace a file whole: a reader sees the old contents or the new,
// never half of either. The daemon keeps its state file and its record of
// original values this way.
package fileio
