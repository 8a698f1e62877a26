// Package metrics counts what the daemon does and writes it, in the
// Prometheus text format, to a file for node_exporter's textfile collector.
// Recording is an atomic add, cheap enough for a burst of a thousand disks;
// the file is written by a goroutine of its own, at most once a second and
// only when something changed (it sleeps while nothing does). It also keeps the event-to-applied latency of the last
// burst, which the daemon shows in its status.
package metrics
