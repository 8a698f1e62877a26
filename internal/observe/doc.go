// Package observe measures a disk's operating point from its own counters,
// /sys/block/DEV/stat (Documentation/block/stat.rst): between two samples,
// the I/O rate, read share, request size, latency per I/O, busy fraction
// and the requests in flight, overall and while busy. A Window keeps those
// points over a span of time in fixed memory and says where the disk ran
// over it. One sample is one read of one small file; disks no one observes
// cost nothing.
package observe
