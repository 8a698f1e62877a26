// Package metrics counts what the daemon does and writes it, in the
// Prometheus text exposition format, to a file for node_exporter's textfile
// collector. Recording is an atomic add, cheap enough for a burst of a
// thousand disks; the file is written by a goroutine of its own, at most
// once a second and only when something changed (it sleeps while nothing
// does). It also keeps the event-to-applied latency of the last burst, which
// the daemon shows in its status.
//
// The format is written by hand, not with client_golang: linking
// client_golang into the daemon put its memory with a burst of new disks
// over the daemon's target (contrib/bench/README.md, "Constants"), for a
// file of a few dozen lines. Its tests parse the output with
// github.com/prometheus/common/expfmt, node_exporter's own parser, so the
// format is still checked against Prometheus's.
package metrics
