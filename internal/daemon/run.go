package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/devnode"
	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/metrics"
	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/procs"
	"github.com/iosched/iosched/internal/restore"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
	"github.com/iosched/iosched/internal/tasks"
	"github.com/iosched/iosched/internal/uevent"
)

// Daemon keeps disks on their policy. Make one with New, run it with Run.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	applier apply.Applier
	pipe    *pipeline.Pipeline
	queue   *tasks.Queue[job]
	policy  atomic.Pointer[policy.Policy]
	writes  atomic.Int64
	orig    *restore.Keeper
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

	// mu guards disks (each disk's record: pass.go, which says the
	// order of the daemon's locks), report, probes and the samplers'
	// running flags.
	mu     sync.Mutex
	disks  map[string]*disk
	report Report

	follow *Follower   // udevd's processed events, in kernel mode
	probes probeLimits // what bounds the probes [rule.probe] asks for: probe.go
	// adapt samples the disks of [rule.adapt] (adapt.go), observe those
	// a rule's observe key asks for (observe.go).
	adapt, observe sampler
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
	// asks are the background tasks' requests to the loop
	// (background.go); reconcileReset restarts the reconcile timer.
	asks           chan ask
	ready          chan struct{} // closed when the start scan is done: Ready
	reconcileReset chan struct{}
}

// New checks cfg and fills in the defaults.
func New(cfg Config) (*Daemon, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:            cfg,
		log:            cfg.Logger,
		applier:        apply.Applier{FS: cfg.FS},
		pipe:           &pipeline.Pipeline{FS: cfg.FS, Nodes: devnode.NodesFor(cfg.FS.Root(), cfg.DevDir), StateDir: cfg.StateDir},
		disks:          map[string]*disk{},
		changed:        make(chan struct{}, 1),
		scanDone:       make(chan scanResult, 1),
		loaded:         make(chan loadResult, 1),
		burstOver:      make(chan struct{}, 1),
		asks:           make(chan ask, 4),
		ready:          make(chan struct{}),
		reconcileReset: make(chan struct{}, 1),
		// The file goes when the daemon stops writing it: frozen
		// counts would be exported as a live daemon's.
		metrics: metrics.New(metrics.Options{Version: cfg.Version, RemoveAtEnd: true, Log: cfg.Logger}),
		locks:   disklock.New(cfg.LockFile),
	}
	d.inFlight = tasks.NewWrites(d.markChanged)
	d.follow = newUdevdFollower(cfg.RulesRoot, cfg.UdevControl, d.log)
	// A stop is asked between rules, not only between disks: a policy of
	// thousands of rules takes a while on each disk in flight. What an
	// evaluation cut short returns is never used: the pass sees the stop.
	d.pipe.Evaluate = func(p *policy.Policy, dev *sysfs.Device) policy.Evaluation {
		ev, _ := cfg.hooks.evaluate(p, dev, d.stopping.Load)
		return ev
	}
	d.probes.retry = cfg.hooks.probeRetry
	if d.probes.retry == 0 {
		d.probes.retry = probeRetry
	}
	d.probes.slots = newSemaphore(policy.DefaultProbeConcurrency)
	d.adapt, d.observe = newSampler(), newSampler()
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

// Ready is closed once the start scan is done and the daemon serves
// uevents, signals and reloads: every disk present at start has had its
// pass. It stays open when Run stops or fails before.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

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
	if d.udev && d.cfg.hooks.privateNetNS != nil {
		if private, why := d.cfg.hooks.privateNetNS(); private {
			return refuseUdevMode(why)
		}
	}
	d.useMetrics(pol)
	d.followPolicy()
	// Interrupted probes' settings first: the originals file is checked
	// against what the daemon left, which a probe's candidate still on a
	// disk would hide.
	d.recoverProbes()
	if d.orig, err = restore.Load(d.cfg.StateDir, d.pipe.FS, d.log); err != nil {
		if pol.Daemon.RestoreOnExit {
			return err
		}
		d.log.Warn("the original values file is ignored: restore_on_exit is off", "error", err)
	}
	d.adaptHist.load(d.cfg.StateDir, d.log)
	d.reloadProbes(pol) // its probe_concurrency
	d.checkUdev()
	// Listen before scanning, so a disk appearing during the scan is
	// either seen by it or heard of afterwards.
	source := uevent.Kernel
	if d.udev {
		source = uevent.Udev
	}
	mon, err := uevent.Listen(uevent.Options{Source: source, Dial: d.cfg.hooks.dial, Log: d.log})
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

	stopStateWriter := d.startBackground()
	defer stopStateWriter()
	l := &eventLoop{d: d}
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
		case r := <-d.scanDone:
			l.scanned(r)
		case r := <-d.loaded:
			l.loaded(r)
		case a := <-d.asks:
			l.asked(a)
		case sig := <-signals:
			switch sig {
			case syscall.SIGHUP:
				l.reload()
			case syscall.SIGUSR1:
				l.scan(settingsOnly, "reconcile")
			default:
				d.log.Info("stopping", "signal", sig.String())
				return d.stop(stopStateWriter)
			}
		case err := <-d.tasks.Failed():
			d.log.Error("a task failed; stopping", "error", err)
			d.stop(stopStateWriter)
			return err
		case <-ctx.Done():
			d.log.Info("stopping")
			return d.stop(stopStateWriter)
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
