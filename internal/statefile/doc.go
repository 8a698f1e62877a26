// Package statefile is the running daemon's state file, state.json in its
// runtime directory: the schema the daemon writes and `iosched status` and
// `iosched reload` read, and the check that the process it names still runs
// and is the daemon that wrote it.
package statefile
