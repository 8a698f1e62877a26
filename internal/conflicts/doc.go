// Package conflicts finds the other programs that write a disk's queue
// attributes: udev rules (read as systemd-udevd reads them) and the tuned
// profiles tuned 2.20 would apply at its start (read as its own loader,
// merger, variable expansion, unit manager and disk and sysfs plug-ins
// read them). For one disk it says which of their assignments could
// apply, so iosched can warn that they undo the policy. Every file is read
// under a root directory, so a copied tree can be checked.
package conflicts
