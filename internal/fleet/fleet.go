// Package fleet reads the fleet's view of iosched's metrics from
// Prometheus: per hardware key, the busy time of the fleet's disks by
// in-flight depth, each candidate scheduler's probe curve across the
// machines that measured it, and the verdict, each candidate's IOPS change
// against the scheduler the kernel would choose, weighted by where the
// fleet's busy time sits.
package fleet

import (
	"context"
	"errors"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Options say what to query.
type Options struct {
	// Match are extra PromQL label matchers applied to every series read,
	// e.g. `{key=~"virtio.*"}` or `{job="node"}`.
	Match string
	// Range is the window the busy time is counted over.
	Range time.Duration
	// At is the end of the window; zero means now.
	At time.Time
	// MinMachines is the fewest machines a key's verdict needs.
	MinMachines int
}

// Report is the fleet's view, one entry per hardware key.
type Report struct {
	Keys []Key
}

// Key is one hardware key's view.
type Key struct {
	Key             string
	Machines, Disks int
	BusyHours       float64
	Depths          []DepthShare
	Curves          []Curve
	Kernel          string
	Verdicts        []Verdict
	Note            string
}

// DepthShare is the share of a key's busy time in one depth bucket.
type DepthShare struct {
	Le    float64 // bucket upper bound, math.Inf(1) for +Inf
	Share float64 // of busy time in this bucket (not cumulative)
}

// Curve is a candidate's curve across the machines that probed it.
type Curve struct {
	Scheduler string
	Points    []CurvePoint
}

// CurvePoint is a candidate's IOPS at one depth over the machines.
type CurvePoint struct {
	Depth            int
	Median, Min, Max float64
	Machines         int
}

// Verdict is a candidate's weighted IOPS change against the kernel's
// choice.
type Verdict struct {
	Scheduler         string
	Change, Low, High float64 // weighted IOPS change vs Kernel, fraction; range over machines
	Machines          int
}

// Query reads the fleet's view from Prometheus.
func Query(ctx context.Context, api v1.API, o Options) (*Report, error) {
	return nil, errors.New("fleet: not implemented yet")
}
