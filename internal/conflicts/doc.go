// Package conflicts finds the other programs that write a disk's queue
// attributes: udev rules (read as systemd-udevd reads them) and the active
// tuned profile's [disk] section. For one disk it says which of their
// assignments could apply, so iosched can warn that they undo the policy.
// Every file is read under a root directory, so a copied tree can be checked.
package conflicts
