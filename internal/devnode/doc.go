// Package devnode opens block device nodes (under /dev, or --dev DIR)
// read-only, to learn what sysfs does not show, such as whether the driver
// accepts RWF_NOWAIT I/O. It never writes to a device and never reads its
// data: the one probe it makes reads at the end of the disk.
package devnode
