// Package originals remembers a disk's settings before iosched changes
// them, so they can be put back after a crash: the daemon's
// restore_on_exit file (every disk it changed) and a probe's record (the
// disk it is switching) are both a File of Records. A Record also keeps what
// its writer left on the disk, and is replayed only while the disk still
// shows it: a value someone set since is theirs, not to be undone.
package originals
