// Package policy is the TOML policy language: decoding it strictly, validating
// it into rules with errors that say where, matching rules against a disk and
// merging their settings with provenance, and the default policy embedded in
// the binary. It never touches a file descriptor of a device.
package policy
