// Package sysfs reads and writes the kernel's view of block devices, rooted at
// a directory (normally /sys, or a copied or fake tree in tests and with
// --sysfs). Every path is built from that root, and every device name is
// validated before a path is built from it.
//
// Reading is one attribute at a time: a missing or unreadable file marks that
// attribute unknown and is recorded in Device.Errors; it never hides the disk.
//
// The attributes iosched sets are one table (attributes.go): an Attr knows
// its kind, range, write order and what writing it resets.
package sysfs
