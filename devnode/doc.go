// Package devnode opens block device nodes (under /dev, or --dev DIR)
// read-only, to learn what sysfs does not show, such as whether the driver
// accepts RWF_NOWAIT I/O. It never writes to a device and never reads past
// its first 4 KiB.
package devnode
