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

	"github.com/iosched/iosched/apply"
	"github.com/iosched/iosched/devnode"
	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

// Defaults.
const (
	DefaultRuntimeDir = "/run/iosched"
	DefaultStateDir   = "/var/lib/iosched"
	DefaultParallel   = 192
)

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
	// RuntimeDir holds state.json; StateDir what must outlive the
	// process (the original values restore_on_exit puts back).
	RuntimeDir string
	StateDir   string
	// RulesRoot is where the udev rules are read to name, in the log, the
	// rule that overrode the policy (default "/").
	RulesRoot string
	// Parallel bounds how many disks are handled at once (default 192).
	// A scheduler switch blocks its thread ~25 ms in the kernel waiting
	// for RCU grace periods, which overlap across disks: 1000 switches
	// take 24 s one by one (KERNEL-NOTES). Each disk in flight holds a
	// thread blocked in the kernel and its pass's memory, ~40 KiB
	// together. 1000 loops at once on 2 vCPUs, 4 Ps, four rounds
	// alternating (a cgo build; the static one packages ship is ~1.5 MiB
	// smaller): 128 at once took 0.24-0.29 s and peaked at a VmHWM of
	// 16.7-17.7 MiB; 192: 0.22-0.27 s, 19.7-20.1 MiB; 256: 0.22-0.25 s,
	// 20.9-22.5 MiB. 192 keeps the static build's peak mostly under the
	// 20 MiB issue 4 sets for 1000 disks: 17.3-20.6 MiB over ~30 timed
	// bursts, 17.7-19.0 MiB in contrib/bench's six runs.
	Parallel int
	// ScanTimeout bounds how long a scan waits for its passes (default
	// 30 s): a disk whose write hangs is left to finish on its own.
	ScanTimeout time.Duration
	// StopTimeout bounds how long a stop waits for passes in flight
	// (default 10 s).
	StopTimeout time.Duration
	Logger      *slog.Logger
	// Signals delivers SIGHUP, SIGTERM, SIGINT, SIGUSR1; nil means the
	// process's own.
	Signals <-chan os.Signal

	// Seams for tests.
	dial          dialer
	followDial    dialer // udevd's events in kernel mode; nil: not followed
	udevdGrace    time.Duration
	evaluate      func(*policy.Policy, *sysfs.Device) policy.Evaluation
	stateDebounce time.Duration
}

// Daemon keeps disks on their policy. Make one with New, run it with Run.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	fs      sysfs.FS
	applier apply.Applier
	queue   *queue
	policy  atomic.Pointer[policy.Policy]
	writes  atomic.Int64
	orig    *originals
	started time.Time
	udev    bool // listening to udevd: properties matter
	// passCtx is cancelled when a stop gives up waiting for passes.
	passCtx    context.Context
	stopPasses context.CancelFunc

	mu     sync.Mutex // guards disks and report
	disks  map[string]*disk
	report report

	follow udevFollow // udevd's processed events, in kernel mode

	changed   chan struct{} // the state file is out of date
	scanDone  chan scanResult
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
		cfg.DevDir = devnode.DefaultDir
	}
	switch cfg.UeventSource {
	case "", "kernel", "udev":
	default:
		return nil, fmt.Errorf("uevent source %q: must be kernel or udev", cfg.UeventSource)
	}
	if cfg.UdevDataDir == "" {
		cfg.UdevDataDir = "/run/udev/data"
	}
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = DefaultRuntimeDir
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.ScanTimeout <= 0 {
		cfg.ScanTimeout = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.dial == nil {
		cfg.dial = dialNetlink
		if cfg.followDial == nil {
			cfg.followDial = dialNetlink
		}
	}
	if cfg.evaluate == nil {
		cfg.evaluate = (*policy.Policy).Evaluate
	}
	if cfg.stateDebounce <= 0 {
		cfg.stateDebounce = 250 * time.Millisecond
	}
	d := &Daemon{
		cfg:       cfg,
		log:       cfg.Logger,
		fs:        cfg.FS,
		applier:   apply.Applier{FS: cfg.FS},
		disks:     map[string]*disk{},
		changed:   make(chan struct{}, 1),
		scanDone:  make(chan scanResult, 1),
		burstOver: make(chan struct{}, 1),
	}
	d.passCtx, d.stopPasses = context.WithCancel(context.Background())
	d.queue = newQueue(cfg.Parallel, d.pass)
	d.queue.idle = func(peak int) {
		if peak > keepThreads() {
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
// arrives (nil: a clean stop), or when it cannot start.
func (d *Daemon) Run(ctx context.Context) error {
	events, signals, cleanup, err := d.start(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	l := d.newLoop()
	defer l.stop()
	for {
		select {
		case ev := <-events:
			switch {
			case ev.lost:
				l.scan(full, "lost uevents")
			case ev.action == "remove":
				d.queue.kick(ev.name, removal, nil, nil)
			default:
				d.queue.kick(ev.name, full, &ev, nil)
			}
		case ev := <-d.follow.events:
			d.recheck(l, ev)
		case <-l.reconcile:
			l.scan(verify, "reconcile")
		case r := <-d.scanDone:
			l.scanned(r)
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
			if d.queue.running() <= keepThreads() {
				go releaseThreads()
			}
		case sig := <-signals:
			switch sig {
			case syscall.SIGHUP:
				l.reload()
			case syscall.SIGUSR1:
				l.scan(verify, "reconcile")
			default:
				d.log.Info("stopping", "signal", sig.String())
				return d.stop()
			}
		case <-ctx.Done():
			d.log.Info("stopping")
			return d.stop()
		}
	}
}

// start loads the policy, opens the uevent socket, passes over every disk
// and tells systemd the daemon is ready.
func (d *Daemon) start(ctx context.Context) (<-chan event, <-chan os.Signal, func(), error) {
	d.started = time.Now()
	pol, err := d.cfg.Load(d.cfg.PolicyPath)
	if err != nil {
		return nil, nil, nil, &PolicyError{err}
	}
	d.setPolicy(pol)
	if d.orig, err = loadOriginals(d.cfg.StateDir, d.fs, d.log); err != nil {
		if pol.Daemon.RestoreOnExit {
			// Starting would write a new file over the values it
			// could not read.
			return nil, nil, nil, err
		}
		d.log.Warn("ignoring the original values file: restore_on_exit is off", "error", err)
	}
	// Listen before scanning, so a disk appearing during the scan is
	// either seen by it or heard of afterwards.
	udev := d.ueventSource(pol) == "udev"
	d.udev = udev
	c, err := d.cfg.dial(udev)
	if err != nil {
		return nil, nil, nil, err
	}
	signals := d.cfg.Signals
	stopSignals := func() {}
	if signals == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
		signals, stopSignals = ch, func() { signal.Stop(ch) }
	}
	events := make(chan event, 1024)
	listenCtx, stopListening := context.WithCancel(ctx)
	l := &listener{dial: d.cfg.dial, udev: udev, log: d.log, out: events, c: c}
	go l.run(listenCtx)
	d.followUdev(listenCtx, udev)
	cleanup := func() {
		stopListening()
		l.wake()
		stopSignals()
	}

	d.noteScan(d.scan(full, "start"))
	d.writeState()
	d.notify(sd.SdNotifyReady + "\n" + d.statusLine())
	d.log.Info("ready", "disks", d.count(), "policy", pol.Sources, "uevents", d.ueventSource(pol))
	return events, signals, cleanup, nil
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

// reload re-reads the policy. An invalid one leaves the old in force; it
// reports whether the new one was taken. The loop re-plans and tells
// systemd when it is done (loop.reload).
func (d *Daemon) reload() bool {
	d.notify(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec())
	pol, err := d.cfg.Load(d.cfg.PolicyPath)
	if err != nil {
		lines := errorLines(err)
		for _, line := range lines {
			d.log.Error("policy reload failed; the previous policy stays in force", "error", line)
		}
		d.noteReload(false, lines)
		return false
	}
	old := d.policy.Load()
	if d.cfg.UeventSource == "" && pol.Daemon.UeventSource != old.Daemon.UeventSource {
		d.log.Warn("uevent_source changes take effect when the daemon restarts", "running", d.ueventSource(old))
	}
	d.setPolicy(pol)
	d.noteReload(true, nil)
	d.log.Info("policy reloaded; re-planning every disk", "policy", pol.Sources)
	return true
}

func (d *Daemon) setPolicy(p *policy.Policy) {
	d.policy.Store(p)
	d.mu.Lock()
	d.report.policy = p
	d.mu.Unlock()
	d.markChanged()
}

// stop lets the passes in flight finish (bounded by StopTimeout), puts the
// original values back when the policy asks, and removes the state file.
// Without restore_on_exit the settings stay: they are what the policy wants,
// a restart (an upgrade) should not flap every disk through the kernel's
// defaults and back, and each switch would freeze the disk's queue.
func (d *Daemon) stop() error {
	d.notify(sd.SdNotifyStopping)
	done := d.queue.close()
	var writing []string // disks whose pass may still write
	select {
	case <-done:
	case <-time.After(d.cfg.StopTimeout):
		d.log.Warn("passes still running at stop; abandoning their remaining writes", "waited", d.cfg.StopTimeout)
		d.stopPasses()
		select {
		case <-done:
		case <-time.After(time.Second):
			// Stuck in a write (a queue frozen behind a dead
			// device): restoring the disk would race with it.
			writing = d.queue.busy()
		}
	}
	if d.policy.Load().Daemon.RestoreOnExit {
		d.restore(writing)
	}
	if err := os.Remove(statePath(d.cfg.RuntimeDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("removing the state file", "error", err)
	}
	return nil
}

// notify sends one sd_notify message; without NOTIFY_SOCKET it does nothing.
func (d *Daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Debug("sd_notify", "error", err)
	}
}

func (d *Daemon) markChanged() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}
