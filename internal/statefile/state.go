package statefile

import (
	"path/filepath"
	"time"

	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/sysfs"
)

// Name is the state file's name in the runtime directory.
const Name = "state.json"

// Path is the state file of the daemon whose runtime directory is dir.
func Path(dir string) string { return filepath.Join(dir, Name) }

// State is what state.json holds: the daemon as `iosched status` shows it.
type State struct {
	PID int `json:"pid"`
	// ProcStart is the process's start time in clock ticks since boot
	// (/proc/PID/stat field 22), and Exe its executable (/proc/PID/exe),
	// so that a recycled pid is not taken for the daemon.
	ProcStart  uint64      `json:"proc_start,omitempty"`
	Exe        string      `json:"exe,omitempty"`
	Started    time.Time   `json:"started"`
	Updated    time.Time   `json:"updated"`
	Policy     PolicyState `json:"policy"`
	LastReload *Reload     `json:"last_reload,omitempty"`
	// Reloads are the last few reloads, newest last, each with the
	// requests it answered: `iosched reload` finds its own there.
	Reloads    []Reload `json:"reloads,omitempty"`
	LastScan   *Scan    `json:"last_scan,omitempty"`
	LastChange *Change  `json:"last_change,omitempty"`
	LastError  *Problem `json:"last_error,omitempty"`
	// PersistenceError is the last failure to save what must outlive the
	// process (the original values restore_on_exit puts back); cleared by
	// the next save that succeeds.
	PersistenceError *Problem `json:"persistence_error,omitempty"`
	// OriginalsUnknown lists the disks some of whose original values are
	// not known (their record was unreadable): restore_on_exit cannot put
	// those back.
	OriginalsUnknown []string `json:"originals_unknown,omitempty"`
	// OriginalsAside lists the records of original values (the daemon's,
	// a probe's) found unreadable and moved aside in the state directory:
	// nothing was restored from them.
	OriginalsAside []string `json:"originals_aside,omitempty"`
	// Warnings are conditions that keep the daemon from doing all its job
	// (no udevd to send the events it listens for, say).
	Warnings []string `json:"warnings,omitempty"`
	// LastBurst is the time from a disk's uevent to its settings applied,
	// over the last burst (disks applied less than a second apart).
	LastBurst *Burst `json:"last_burst,omitempty"`
	// Metrics is the metrics file written ([daemon] metrics_file).
	Metrics *Metrics `json:"metrics,omitempty"`
	// PolicyFollowed: the daemon follows its policy files and reloads on a
	// change by itself (else only on SIGHUP).
	PolicyFollowed bool `json:"policy_followed"`
	// Managed counts the disks at least one rule matched.
	Managed int                   `json:"managed"`
	Disks   map[string]*DiskState `json:"disks"`
}

// PolicyState is the policy in force.
type PolicyState struct {
	Sources           []string `json:"sources"`
	UeventSource      string   `json:"uevent_source"`
	ReconcileInterval string   `json:"reconcile_interval"`
	RestoreOnExit     bool     `json:"restore_on_exit"`
	// SeedErrors are the errors of the seeded probe results ([daemon]
	// probe_results): a file not read, a result refused, each named.
	SeedErrors []string `json:"seed_errors,omitempty"`
}

// Reload is the outcome of one SIGHUP.
type Reload struct {
	// Seq counts the SIGHUPs taken since start.
	Seq int       `json:"seq"`
	At  time.Time `json:"at"`
	OK  bool      `json:"ok"`
	// Requests are the `iosched reload` requests this reload answers: those
	// made before it read the policy.
	Requests []string `json:"requests,omitempty"`
	Errors   []string `json:"errors,omitempty"`
	// Done: an invalid policy was refused, or a valid one has re-planned
	// every disk (READY=1 was sent).
	Done bool `json:"done"`
}

// Burst is the event-to-applied latency of the disks of one burst, in
// seconds.
type Burst struct {
	Disks int `json:"disks"`
	// Truncated: the burst had more disks than are kept (2048); the
	// figures are the latest disks'.
	Truncated bool      `json:"truncated,omitempty"`
	P50       float64   `json:"p50_seconds"`
	P99       float64   `json:"p99_seconds"`
	Max       float64   `json:"max_seconds"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
}

// Metrics is the Prometheus textfile the daemon writes.
type Metrics struct {
	File string `json:"file"`
	// Error is the last write's failure, "" once a write succeeds.
	Error string `json:"error,omitempty"`
}

// Scan is the last pass over every disk.
type Scan struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Disks  int       `json:"disks"`
	Writes int64     `json:"writes"`
	// Seconds is how long it took, to the microsecond.
	Seconds float64 `json:"seconds"`
}

// Change is one attribute the daemon wrote.
type Change struct {
	At        time.Time `json:"at"`
	Device    string    `json:"device"`
	Attribute string    `json:"attribute"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Rule      string    `json:"rule"`
	// Drift: it had been set and someone changed it back.
	Drift bool `json:"drift,omitempty"`
}

// Problem is an error and when it happened.
type Problem struct {
	At      time.Time `json:"at"`
	Device  string    `json:"device,omitempty"`
	Message string    `json:"message"`
}

// DiskState is one disk as the daemon last left it.
type DiskState struct {
	Class    sysfs.Class `json:"class"`
	Rules    []string    `json:"rules"`
	Settings []Applied   `json:"settings"`
	Skipped  []plan.Skip `json:"skipped,omitempty"`
	// Errors are attributes that could not be read.
	Errors []string `json:"errors,omitempty"`
	// Refused are writes the kernel refused, not retried before Retry.
	Refused   []Refusal `json:"refused,omitempty"`
	LastError *Problem  `json:"last_error,omitempty"`
	// Probe is the disk's [rule.probe] decision, or the probe it waits
	// for; nil when no rule probes it.
	Probe *ProbeState `json:"probe,omitempty"`
	// InFlight are the writes to the disk's settings the daemon left to
	// finish on their own and still in the kernel: a probe's scheduler
	// switch or restore on a disk that has not answered (a switch waits
	// for the disk's I/O in flight).
	InFlight []InFlight `json:"in_flight,omitempty"`
	// Adapt is the disk's [rule.adapt]: the operating point its
	// workload runs at and what the daemon chose by it; nil when no
	// adaptive rule matches it, or its probe has no decision yet.
	Adapt *AdaptState `json:"adapt,omitempty"`
	// Held says why the daemon has not written the disk since At:
	// another process holds its lock (an `iosched probe` measuring it,
	// perhaps one stuck on a disk that stopped answering, or an
	// `iosched apply`). Cleared by the next pass that may write it.
	Held *Problem `json:"held,omitempty"`
}

// InFlight is one write still in the kernel.
type InFlight struct {
	// What is "restore" or "scheduler NAME".
	What  string    `json:"what"`
	Since time.Time `json:"since"`
}

// ProbeState is where a disk's probe stands.
type ProbeState struct {
	Rule string `json:"rule"`
	// Status is "pending" (queued, or waiting for an idle disk),
	// "running", "decided", "refused", "failed", "cancelled" or "budget"
	// (probe_budget spent: the interim settings stay).
	Status string `json:"status"`
	// Interim is the scheduler the rule sets until a decision (none: the
	// disk's own stays).
	Interim    string `json:"interim,omitempty"`
	Winner     string `json:"winner,omitempty"`
	Provenance string `json:"provenance,omitempty"`
	// From is "probed <time>", "remembered <time>" or "seeded from FILE".
	From  string    `json:"from,omitempty"`
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since"`
}

// AdaptState is where an adaptive disk's workload runs and what the daemon
// chose by it.
type AdaptState struct {
	Rule string `json:"rule"`
	// Sample and Window are the rule's, as written in a policy ("5s").
	Sample string `json:"sample"`
	Window string `json:"window"`
	// Scheduler is the adaptive choice in force: the disk's wanted
	// scheduler until the next switch; "" before the first switch (the
	// probe's decision stands).
	Scheduler string `json:"scheduler,omitempty"`
	// BusyDepth is the last sample's mean requests in flight while the
	// disk was busy; Busy its busy fraction.
	BusyDepth float64 `json:"busy_depth"`
	Busy      float64 `json:"busy"`
	// WindowDepth is the window's operating point (the busy-time-weighted
	// median busy depth of its busy samples; 0 when it was idle), and
	// WindowSeconds how much of the window the samples cover.
	WindowDepth   float64 `json:"window_depth"`
	WindowSeconds float64 `json:"window_seconds"`
	// Favoured is the candidate the probe's curves favour at WindowDepth,
	// Gain by how much over the scheduler now (0.52 for 1.52x).
	Favoured string  `json:"favoured,omitempty"`
	Gain     float64 `json:"gain,omitempty"`
	// Agreeing is the candidate every sample since AgreeingSince favoured
	// by more than the margin: a switch to it comes once that spans a
	// window.
	Agreeing      string     `json:"agreeing,omitempty"`
	AgreeingSince *time.Time `json:"agreeing_since,omitempty"`
	LastSwitch    *Switch    `json:"last_switch,omitempty"`
	// SwitchesToday counts the switches in the last 24 hours.
	SwitchesToday int `json:"switches_today"`
	// PinnedUntil is when a disk the guard rail switched back may switch
	// again.
	PinnedUntil *time.Time `json:"pinned_until,omitempty"`
	// Held says why a switch the window agreed on waits (min_interval,
	// max_switches_per_day, the pin).
	Held string `json:"held,omitempty"`
	// GuardVerdict is why the guard rail's last comparison kept a switch
	// (latency no worse, or worse by a rise that was not the switch's
	// doing: a credit cliff, a rate ceiling).
	GuardVerdict string `json:"guard_verdict,omitempty"`
	// GuardCleared is the guard rail's review lifting the pin of its
	// switch back: latency stayed as bad on the scheduler it went back
	// to, so the rise was not the switch's doing.
	GuardCleared *GuardCleared `json:"guard_cleared,omitempty"`
}

// GuardCleared is when and why the guard rail lifted a disk's pin.
type GuardCleared struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// Switch is one adaptive switch of a disk's scheduler.
type Switch struct {
	At   time.Time `json:"at"`
	From string    `json:"from"`
	To   string    `json:"to"`
	// Reason is the switch's provenance: "adapt: busy depth 23 over 10m;
	// curve: none 1.52x mq-deadline at depth 23".
	Reason string `json:"reason"`
}

// Applied is one setting the policy makes on a disk.
type Applied struct {
	Attribute string `json:"attribute"`
	Value     string `json:"value"`
	// Want is set when the value is not (yet) what the policy asks.
	Want string `json:"want,omitempty"`
	Rule string `json:"rule"`
}

// Refusal is a value the kernel refused for an attribute.
type Refusal struct {
	Attribute string    `json:"attribute"`
	Value     string    `json:"value"`
	Error     string    `json:"error"`
	Since     time.Time `json:"since"`
	Retry     time.Time `json:"retry"`
}

// ReloadRequestDir holds one empty file per `iosched reload` waiting for its
// answer, named by the request. The reload that reads the policy next takes
// every request there and lists them in its Reload.Requests, so reloads
// that overlap each find their own answer.
func ReloadRequestDir(runtimeDir string) string { return filepath.Join(runtimeDir, "reload-requests") }
