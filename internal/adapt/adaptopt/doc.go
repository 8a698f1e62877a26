// Package adaptopt says how an adaptive rule judges a disk: the one options
// type [rule.adapt] fills, its defaults, limits and validation. It does no
// I/O and imports nothing of iosched, so the policy validates [rule.adapt]
// without depending on package adapt (which reads probe curves).
package adaptopt
