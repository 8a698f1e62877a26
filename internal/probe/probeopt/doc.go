// Package probeopt says what a probe is asked to do: the one options type
// that a policy's [rule.probe] and `iosched probe`'s flags both fill, its
// defaults, its limits and its one validation, and the one list of the
// engines a probe can read with (name, what its reports can say). It does no I/O: the policy validates [rule.probe]
// with it without depending on package probe, which opens disks.
package probeopt
