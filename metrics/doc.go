// Package metrics counts what the daemon does and writes it, in the
// Prometheus text format, to a file for node_exporter's textfile collector.
// Recording is an atomic add, cheap enough for a burst of a thousand disks;
// the file is written on a timer, at most once a second and only when
// something changed. It also keeps the event-to-applied latency of the last
// burst, which the daemon shows in its status.
package metrics
