package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/daemonstate"
	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/metrics"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/procs"
	"github.com/iosched/iosched/internal/restore"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
	"github.com/iosched/iosched/internal/udevfollow"
	"github.com/iosched/iosched/internal/uevent"
)

// DefaultParallel is how many disks' passes run at once by default.
const DefaultParallel = 64

// Config is what a daemon needs; the zero value of each field means its
// default.
type Config struct {
	// PolicyPath is given to Load: a file, a directory of *.toml, or ""
	// for the default locations.
	PolicyPath string
	// Load reads and validates a policy (policy.Load by default).
	Load func(path string) (*policy.Policy, error)
	FS   sysfs.FS
	// DevDir holds the device nodes the NOWAIT check opens.
	DevDir string
	// UeventSource, "kernel" or "udev", overrides the policy's.
	UeventSource string
	// UdevDataDir is udevd's database (default /run/udev/data): in udev
	// mode, the properties of disks no event has told about yet.
	UdevDataDir string
	// UdevControl is udevd's control socket (default /run/udev/control):
	// in udev mode, nothing answering there means no udevd runs to send
	// events.
	UdevControl string
	// RuntimeDir holds state.json; StateDir what must outlive the
	// process (the original values restore_on_exit puts back).
	RuntimeDir string
	StateDir   string
	// LockFile is the machine's lock of disks' settings (default
	// paths.Default.DiskLock), which `iosched apply` and probes take too:
	// not under StateDir, so that one started with another state
	// directory is still excluded.
	LockFile string
	// RulesRoot is where the udev rules are read to name, in the log, the
	// rule that overrode the policy (default "/").
	RulesRoot string
	// Parallel bounds how many disks are handled at once (default 64).
	// A scheduler switch blocks its thread ~25 ms in the kernel waiting
	// for RCU grace periods, which overlap across disks, so a burst is
	// handled many disks at once; but each disk in flight holds a thread
	// blocked in the kernel and its pass's memory, ~40 KiB together. The
	// default is where more at once stopped paying for its memory
	// (contrib/bench/README.md has the measurements).
	Parallel int
	// ScanTimeout bounds how long a scan waits for its passes (default
	// 30 s): a disk whose write hangs is left to finish on its own.
	ScanTimeout time.Duration
	// StopTimeout bounds how long a stop waits for passes in flight
	// (default DefaultStopTimeout); StopBound is the whole stop's.
	StopTimeout time.Duration
	// LoadTimeout bounds how long reading the policy may take (default
	// 10 s): a load that takes longer is refused.
	LoadTimeout time.Duration
	Logger      *slog.Logger
	// Signals delivers SIGHUP, SIGTERM, SIGINT, SIGUSR1; nil means the
	// process's own.
	Signals <-chan os.Signal
	// NoPolicyFollow: reload only on SIGHUP, not when the policy's files
	// change.
	NoPolicyFollow bool
	// Version is the release, for the metrics' iosched_build_info.
	Version string

	// Seams for tests.
	dial          uevent.Dialer
	followDial    uevent.Dialer // udevd's events in kernel mode; nil: not followed
	udevdGrace    time.Duration
	evaluate      func(*policy.Policy, *sysfs.Device, func() bool) (policy.Evaluation, bool)
	stateDebounce time.Duration
	probeRetry    time.Duration // after a busy disk (default probeRetry)
	// policyDebounce: the quiet time before a changed policy is reloaded
	// (policywatch's default when 0).
	policyDebounce time.Duration
	// privateNetNS tells whether the process runs in a network
	// namespace of its own (uevent.PrivateNetNS); nil with a test's
	// dialer.
	privateNetNS func() (bool, string)
	// restoreTarget, when set, wraps what the restore at stop writes to.
	restoreTarget func(apply.QueueAttrs) apply.QueueAttrs
	// probeStep, when set, is called as a probe goes: "queued" (in the
	// pass that queued it, before that pass writes), "waiting for the
	// pass" (the probe's goroutine, before it waits for that pass to
	// end), "measuring" (passes now skip the disk).
	probeStep func(name, step string)
	// adaptSampled, when set, is called after each sample of an adaptive
	// disk with its operating point, the controller's decision and the
	// scheduler the sample was taken under.
	adaptSampled func(name string, p observe.Point, dec adapt.Decision, scheduler string)
}

// Daemon keeps disks on their policy. Make one with New, run it with Run.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	fs      sysfs.FS
	applier apply.Applier
	pipe    *pipeline.Pipeline
	queue   *tasks.Queue[job]
	policy  atomic.Pointer[policy.Policy]
	writes  atomic.Int64
	passes  atomic.Int64 // passes run: what tests count instead of sleeping
	orig    *restore.Originals
	locks   *disklock.Locks
	started time.Time
	exe     string // this process's executable, for the state file
	udev    bool   // listening to udevd: properties matter
	// stopping is set when a stop begins: a pass that has not started
	// writing gives up, so a stop does not wait for a scan to finish.
	stopping atomic.Bool
	// passCtx, derived from Run's, is cancelled when a stop gives up
	// waiting for passes.
	passCtx    context.Context
	stopPasses context.CancelFunc
	// tasks are the goroutines Run starts besides passes (the uevent
	// monitors, the policy follower, the metrics writer, scans, policy
	// loads, probes, the thread release): Run returns once they have.
	tasks *tasks.Group
	// persistFailed is set while the last save of the original values
	// failed, so a pass that saves them clears the error only then.
	persistFailed atomic.Bool

	mu     sync.Mutex // guards disks and report
	disks  map[string]*disk
	report daemonstate.Report

	follow *udevfollow.Follower // udevd's processed events, in kernel mode
	probes probes               // [rule.probe]: probe.go
	adapt  adaptive             // [rule.adapt]: adapt.go
	// observed is the disks a rule's observe key asks for: observe.go.
	observed observing
	// adaptHist keeps the adaptive disks' switch histories in the state
	// directory: adapthistory.go.
	adaptHist adaptHistories
	// procs raises GOMAXPROCS while probes whose engine asks for more
	// goroutines run (probe.Runner.Procs): the process's, so the daemon's.
	procs procs.Raiser
	// inFlight lists the writes left to finish on their own (a probe's
	// switch or restore, a restore at stop, on a disk that does not
	// answer), for the state file and the stop's log.
	inFlight *tasks.Writes

	metrics        *metrics.Recorder // counts for the metrics file and status
	metricsWriting bool              // the writer task runs; the loop's
	policyChanged  <-chan struct{}   // the policy's files changed; nil: not followed
	// policyFollowed: the policy follower runs (set before it starts,
	// cleared when it stops on an error; policyChanged then stays set
	// but never fires).
	policyFollowed atomic.Bool

	changed chan struct{} // the state file is out of date
	// stateDue: the loop has a state write scheduled that has not
	// started; a change made meanwhile is in it, and wakes no one.
	stateDue  atomic.Bool
	scanDone  chan scanResult
	loaded    chan loadResult
	burstOver chan struct{} // the queue went idle after many passes at once
}

// New checks cfg and fills in the defaults.
func New(cfg Config) (*Daemon, error) {
	if cfg.Load == nil {
		cfg.Load = policy.Load
	}
	if cfg.FS.Root() == "" {
		fs, err := sysfs.NewFS("")
		if err != nil {
			return nil, err
		}
		cfg.FS = fs
	}
	if cfg.DevDir == "" {
		cfg.DevDir = paths.Default.Dev
	}
	switch cfg.UeventSource {
	case "", "kernel", "udev":
	default:
		return nil, fmt.Errorf("uevent source %q: must be kernel or udev", cfg.UeventSource)
	}
	if cfg.UdevDataDir == "" {
		cfg.UdevDataDir = "/run/udev/data"
	}
	if cfg.UdevControl == "" {
		cfg.UdevControl = "/run/udev/control"
	}
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = paths.Default.Runtime
	}
	if cfg.StateDir == "" {
		cfg.StateDir = paths.Default.State
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.ScanTimeout <= 0 {
		cfg.ScanTimeout = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.LoadTimeout <= 0 {
		cfg.LoadTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.dial == nil {
		cfg.dial = uevent.Dial
		cfg.privateNetNS = uevent.PrivateNetNS
		if cfg.followDial == nil {
			cfg.followDial = uevent.Dial
		}
	}
	if cfg.evaluate == nil {
		cfg.evaluate = (*policy.Policy).EvaluateUntil
	}
	if cfg.stateDebounce <= 0 {
		cfg.stateDebounce = 250 * time.Millisecond
	}
	d := &Daemon{
		cfg:       cfg,
		log:       cfg.Logger,
		fs:        cfg.FS,
		applier:   apply.Applier{FS: cfg.FS},
		pipe:      &pipeline.Pipeline{FS: cfg.FS, Nodes: devnode.NodesFor(cfg.FS.Root(), cfg.DevDir), StateDir: cfg.StateDir},
		disks:     map[string]*disk{},
		changed:   make(chan struct{}, 1),
		scanDone:  make(chan scanResult, 1),
		loaded:    make(chan loadResult, 1),
		burstOver: make(chan struct{}, 1),
		// The file goes when the daemon stops writing it: frozen
		// counts would be exported as a live daemon's.
		metrics: metrics.New(metrics.Options{Version: cfg.Version, RemoveAtEnd: true, Log: cfg.Logger}),
		locks:   disklock.New(cfg.LockFile),
	}
	d.inFlight = tasks.NewWrites(d.markChanged)
	d.follow = udevfollow.New(cfg.RulesRoot, cfg.UdevControl, d.log)
	// A stop is asked between rules, not only between disks: a policy of
	// thousands of rules takes a while on each disk in flight. What an
	// evaluation cut short returns is never used: the pass sees the stop.
	d.pipe.Evaluate = func(p *policy.Policy, dev *sysfs.Device) policy.Evaluation {
		ev, _ := cfg.evaluate(p, dev, d.stopping.Load)
		return ev
	}
	d.probes.retry = cfg.probeRetry
	d.probes.init(policy.DefaultProbeConcurrency)
	d.adapt.init()
	d.queue = tasks.NewQueue(cfg.Parallel, d.pass)
	d.queue.Idle = func(peak int) {
		if peak > procs.KeepThreads() {
			select {
			case d.burstOver <- struct{}{}:
			default:
			}
		}
	}
	return d, nil
}

// PolicyError is an invalid policy at start: the process exits 1 with the
// same lines `iosched check` prints.
type PolicyError struct{ Err error }

func (e *PolicyError) Error() string { return e.Err.Error() }
func (e *PolicyError) Unwrap() error { return e.Err }

// Run starts the daemon and returns when ctx is done or SIGTERM/SIGINT
// arrives (nil: a clean stop, also during the start), when it cannot
// start, or when one of its tasks fails. It returns once every goroutine it
// started has ended, but those stuck in the kernel (a write to a dead
// device, a read of a policy on a hung filesystem), which it waits for
// only so long (StopTimeout, taskGrace).
func (d *Daemon) Run(ctx context.Context) error {
	signals, stopSignals := d.signals()
	defer stopSignals()
	defer d.locks.Close() // once the last disk's lock is let go
	unlock, err := disklock.LockRuntimeDir(d.cfg.RuntimeDir)
	if err != nil {
		return err
	}
	defer unlock()
	// The tasks and passes carry Run's context but outlive its end until
	// the stop is done: the passes in flight finish their writes, and the
	// metrics file's last write counts the stop's restores.
	d.passCtx, d.stopPasses = context.WithCancel(context.WithoutCancel(ctx))
	defer d.stopPasses()
	d.tasks = tasks.NewGroup(context.WithoutCancel(ctx))
	defer d.stopTasks()
	d.started = time.Now()
	d.exe = statefile.Exe(os.Getpid())

	pol, err := d.loadAtStart(ctx, signals)
	if err != nil || pol == nil {
		return err // nil: stopped while loading
	}
	d.setPolicy(pol)
	d.udev = d.ueventSource(pol) == "udev"
	if d.udev && d.cfg.privateNetNS != nil {
		if private, why := d.cfg.privateNetNS(); private {
			return refuseUdevMode(why)
		}
	}
	d.useMetrics(pol)
	d.followPolicy()
	// Interrupted probes' settings first: the originals file is checked
	// against what the daemon left, which a probe's candidate still on a
	// disk would hide.
	d.recoverProbes()
	if d.orig, err = restore.Load(d.cfg.StateDir, d.fs, d.log); err != nil {
		if pol.Daemon.RestoreOnExit {
			return err
		}
		d.log.Warn("the original values file is ignored: restore_on_exit is off", "error", err)
	}
	d.adaptHist.load(d.cfg.StateDir, d.log)
	d.probes.reset(pol.Daemon.ProbeConcurrency)
	d.checkUdev()
	// Listen before scanning, so a disk appearing during the scan is
	// either seen by it or heard of afterwards.
	source := uevent.Kernel
	if d.udev {
		source = uevent.Udev
	}
	mon, err := uevent.Listen(uevent.Options{Source: source, Dial: d.cfg.dial, Log: d.log})
	if err != nil {
		return err
	}
	d.tasks.Start(mon)
	d.followUdev()
	// A state file that cannot be written would make status and reload
	// say no daemon runs: refuse to start instead.
	if err := d.writeState(); err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}

	l := d.newEventLoop()
	defer l.stop()
	l.tasksStarting = d.tasks.Ready()
	l.scan(full, "start")
	for {
		select {
		case ev := <-mon.Events():
			d.countUevent(ev)
			switch {
			case ev.Lost:
				l.scan(full, "lost uevents")
			case ev.Action == "remove":
				d.kick(ev.Name, removal, nil, nil)
			default:
				d.kick(ev.Name, full, &ev, nil)
			}
		case ev := <-d.follow.Events():
			d.countFollowed(ev)
			d.recheck(l, ev)
		case <-l.tasksStarting:
			l.tasksReady()
		case <-l.reconcile:
			d.checkUdev()
			l.scan(settingsOnly, "reconcile")
		case r := <-d.scanDone:
			l.scanned(r)
		case r := <-d.loaded:
			l.loaded(r)
		case <-l.loadDeadline:
			l.loadTimedOut()
		case <-d.changed:
			l.flushSoon()
		case <-l.flush:
			l.flushNow()
		case <-l.watchdog:
			d.notify(sd.SdNotifyWatchdog)
		case <-d.burstOver:
			l.releaseSoon()
		case <-l.release:
			l.release = nil
			// Not in the middle of the next burst: it needs those
			// threads, and the memory given back would be faulted in
			// again; its end asks again. A few passes running (one
			// hung in the kernel, say) do not hold the release back.
			if d.queue.Running() <= procs.KeepThreads() {
				d.tasks.Do("thread release", func(context.Context) { procs.ReleaseThreads() })
			}
		case <-d.policyChanged:
			l.reload()
		case sig := <-signals:
			switch sig {
			case syscall.SIGHUP:
				l.reload()
			case syscall.SIGUSR1:
				l.scan(settingsOnly, "reconcile")
			default:
				d.log.Info("stopping", "signal", sig.String())
				return d.stop()
			}
		case err := <-d.tasks.Failed():
			d.log.Error("a task failed; stopping", "error", err)
			d.stop()
			return err
		case <-ctx.Done():
			d.log.Info("stopping")
			return d.stop()
		}
	}
}

// signals is the channel SIGHUP, SIGTERM, SIGINT and SIGUSR1 arrive on, and
// the function that stops them.
func (d *Daemon) signals() (<-chan os.Signal, func()) {
	if d.cfg.Signals != nil {
		return d.cfg.Signals, func() {}
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	return ch, func() { signal.Stop(ch) }
}

// DefaultStopTimeout is Config.StopTimeout's default.
const DefaultStopTimeout = 10 * time.Second

// passGrace is how long a stop waits, past StopTimeout, for the passes it
// abandoned to return from the writes they are in.
const passGrace = time.Second

// StopBound is the longest Run takes from SIGTERM to its return with
// stopTimeout as Config.StopTimeout: the probes and passes in flight share
// stopTimeout, abandoned passes get passGrace more, the restore of
// original values (restore_on_exit) stopTimeout and restore.Grace, the
// tasks taskGrace. The systemd unit's TimeoutStopSec must be above it
// (packaging/unit_test.go checks), or systemd kills the daemon in the
// middle of its restore.
//
// The process can outlive it, and no signal shortens that: a write to a
// disk whose queue is frozen behind I/O the disk does not answer waits in
// the kernel (blk_mq_freeze_queue_wait, block/blk-mq.c) uninterruptibly,
// and a process exits only once all its threads have left the kernel. Run
// gives up on such a write in time and logs the disk as not restored; the
// process then ends when the disk answers.
func StopBound(stopTimeout time.Duration) time.Duration {
	return stopTimeout + passGrace + stopTimeout + restore.Grace + taskGrace
}

// taskGrace bounds how long Run waits, once stopped, for its tasks: they
// end within microseconds of the stop, but for a policy load stuck in a read
// (a hung network filesystem), which nothing can interrupt, and whose answer
// no one waits for any more.
const taskGrace = time.Second

// stopTasks ends the tasks and waits for them, at most taskGrace, naming
// those left running.
func (d *Daemon) stopTasks() {
	if left := d.tasks.Stop(taskGrace); len(left) > 0 {
		d.log.Warn("tasks still running at exit", "tasks", left, "waited", taskGrace)
	}
}

// loadResult is a policy read off the loop.
type loadResult struct {
	seq int // which load: a late answer to one given up on is dropped
	pol *policy.Policy
	err error
}

// load reads the policy on a goroutine of its own and sends the result to
// d.loaded, or to out when set.
func (d *Daemon) load(seq int, out chan<- loadResult) {
	if out == nil {
		out = d.loaded
	}
	d.tasks.Do("policy load", func(ctx context.Context) {
		pol, err := d.cfg.Load(d.cfg.PolicyPath)
		select {
		case out <- loadResult{seq: seq, pol: pol, err: err}:
		case <-ctx.Done(): // no one waits any more
		}
	})
}

// loadAtStart reads the policy, bounded by LoadTimeout. A stop asked
// meanwhile returns nil, nil.
func (d *Daemon) loadAtStart(ctx context.Context, signals <-chan os.Signal) (*policy.Policy, error) {
	out := make(chan loadResult, 1)
	d.load(0, out)
	timeout := time.NewTimer(d.cfg.LoadTimeout)
	defer timeout.Stop()
	for {
		select {
		case r := <-out:
			if r.err != nil {
				return nil, &PolicyError{r.err}
			}
			return r.pol, nil
		case <-timeout.C:
			return nil, &PolicyError{fmt.Errorf("%w within %s", errLoadTimeout, d.cfg.LoadTimeout)}
		case sig := <-signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				d.log.Info("stopping while the policy loads", "signal", sig.String())
				return nil, nil
			}
		case <-ctx.Done():
			return nil, nil
		}
	}
}

var errLoadTimeout = errors.New("policy: reading it did not finish")

// ErrUdevUnreachable is a start refused in udev mode where udevd's events
// cannot arrive: the daemon runs in a network namespace of its own.
var ErrUdevUnreachable = errors.New("udev mode cannot work in a private network namespace")

// refuseUdevMode is the error that refuses udev mode in a private network
// namespace, naming what to do instead.
func refuseUdevMode(why string) error {
	return fmt.Errorf("%w (%s): udevd's events do not reach this process. "+
		"Run it in the host's network namespace (the unit's drop-in /usr/share/iosched/udev-mode.conf does so), "+
		`or set [daemon] uevent_source = "kernel": the kernel's uevents reach a private network namespace too`, ErrUdevUnreachable, why)
}

func (d *Daemon) ueventSource(pol *policy.Policy) string {
	if d.cfg.UeventSource != "" {
		return d.cfg.UeventSource
	}
	if pol.Daemon.UeventSource == "" {
		return "kernel"
	}
	return pol.Daemon.UeventSource
}

// checkUdev warns, in the log once and in the state for as long as it
// lasts, when the daemon listens to udevd's events and no udevd runs
// (nothing answers on its control socket: Follower.NoUdevd): hot-plugged disks
// would go unnoticed until the next reconcile or rescan.
func (d *Daemon) checkUdev() {
	pol := d.policy.Load()
	if pol == nil || d.ueventSource(pol) != "udev" {
		return
	}
	err := d.follow.NoUdevd()
	msg := ""
	if err != nil {
		msg = fmt.Sprintf("uevent_source is udev, but no udevd runs (%s: %v): disks that appear or change are not seen until the next reconcile", d.cfg.UdevControl, errors.Unwrap(err))
	}
	d.mu.Lock()
	old := d.report.UdevWarning
	d.report.UdevWarning = msg
	d.mu.Unlock()
	if msg != old {
		if msg != "" {
			d.log.Warn("no udevd runs: hot-plugged disks are seen only at the next reconcile", "control_socket", d.cfg.UdevControl)
		} else {
			d.log.Info("udevd runs again", "control_socket", d.cfg.UdevControl)
		}
		d.markChanged()
	}
}

// reloaded takes a policy read on SIGHUP, or records why it was refused; it
// reports whether it was taken. The loop re-plans and tells systemd when it
// is done (loop.loaded).
func (d *Daemon) reloaded(pol *policy.Policy, err error, requests []string) bool {
	if err != nil {
		lines := daemonstate.ErrorLines(err)
		for _, line := range lines {
			d.log.Error("policy reload failed; the previous policy stays in force", "error", line)
		}
		d.noteReload(false, lines, requests)
		d.metrics.Reloaded(err)
		return false
	}
	old := d.policy.Load()
	if d.cfg.UeventSource == "" && pol.Daemon.UeventSource != old.Daemon.UeventSource {
		d.log.Warn("uevent_source changes take effect when the daemon restarts", "running", d.ueventSource(old))
	}
	d.setPolicy(pol)
	d.probes.reload(pol)
	d.useMetrics(pol)
	d.noteReload(true, nil, requests)
	d.metrics.Reloaded(nil)
	d.log.Info("policy reloaded; re-planning every disk", "policy", pol.Sources)
	return true
}

func (d *Daemon) setPolicy(p *policy.Policy) {
	d.policy.Store(p)
	d.mu.Lock()
	d.report.Policy = p
	d.mu.Unlock()
	d.markChanged()
}

// stop abandons the scans and passes not yet writing, lets the writes in
// flight finish (bounded by StopTimeout), puts the original values back when
// the policy asks, and removes the state file. Without restore_on_exit the
// settings stay: they are what the policy wants, a restart (an upgrade)
// should not flap every disk through the kernel's defaults and back, and
// each switch would freeze the disk's queue.
func (d *Daemon) stop() error {
	d.stopping.Store(true)
	d.notify(sd.SdNotifyStopping)
	deadline := time.Now().Add(d.cfg.StopTimeout) // probes and passes share it
	d.probes.cancelAll()
	if left := d.tasks.WaitFor(d.cfg.StopTimeout, isProbeTask); len(left) > 0 {
		d.log.Warn("a probe was still restoring its disk at stop", "probes", left, "waited", d.cfg.StopTimeout)
	}
	done := d.queue.Close()
	var writing []string // disks whose pass may still write
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		d.log.Warn("passes still running at stop; abandoning their remaining writes", "waited", d.cfg.StopTimeout)
		d.stopPasses()
		select {
		case <-done:
		case <-time.After(passGrace):
			// Stuck in a write (a queue frozen behind a dead
			// device): restoring the disk would race with it.
			writing = d.queue.Busy()
		}
	}
	d.follow.StopGraces() // no pass is asked for after Run
	var err error
	if d.policy.Load().Daemon.RestoreOnExit && d.orig != nil {
		applier := d.applier
		if d.cfg.restoreTarget != nil {
			applier.FS = d.cfg.restoreTarget(applier.FS)
		}
		failed := d.orig.Restore(restore.Stop{Writing: writing, ProbeRuns: d.probes.holds, Locks: d.locks,
			Applier: applier, Timeout: d.cfg.StopTimeout, InFlight: d.inFlight, Log: d.log})
		if failed > 0 {
			// restore_on_exit promised the original values: a stop
			// that could not keep the promise is a failed stop, for
			// systemd (the unit shows failed) and for whoever stopped it.
			err = fmt.Errorf("%w: %d disk(s), named in the log above; the values known stay remembered in %s for the next start",
				ErrNotRestored, failed, d.cfg.StateDir)
			d.log.Error("stopping with disks not restored; exit status 1", "failed", failed)
		}
	}
	for _, w := range d.inFlight.All() {
		d.log.Warn("left at stop: a write still in the kernel (the disk has not answered); it finishes on its own", "device", w.Disk, "write", w.What, "since", w.Since.Format(time.RFC3339))
	}
	if err := os.Remove(statefile.Path(d.cfg.RuntimeDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("removing the state file", "error", err)
	}
	return err
}

// ErrNotRestored is a stop with restore_on_exit that could not put back
// every disk's original values (a write that failed or did not return,
// values unknown): Run returns it, and the process exits 1.
var ErrNotRestored = errors.New("restore_on_exit: not every disk's original values were restored")

// markChanged tells the loop the state file is out of date, unless a write
// already scheduled will show the change: a burst of 1000 disks then wakes
// the loop once, not once a disk.
func (d *Daemon) markChanged() {
	if d.stateDue.Load() {
		return
	}
	select {
	case d.changed <- struct{}{}:
	default:
	}
}
