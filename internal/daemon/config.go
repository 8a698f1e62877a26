package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/iosched/iosched/internal/adapt"
	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/observe"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
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
	// A scheduler switch blocks its thread in the kernel waiting for RCU
	// grace periods, which overlap across disks, so a burst is handled
	// many disks at once; but each disk in flight holds a thread blocked
	// in the kernel and its pass's memory. The
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

	// hooks are the seams tests set; production leaves them zero.
	hooks hooks
}

// hooks are what tests replace or watch in a daemon: none is set outside
// tests, and each zero value means the production behaviour.
type hooks struct {
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
	// passTarget, when set, wraps what a pass writes a disk's settings
	// to: tests record the writes that would reach the kernel.
	passTarget func(apply.QueueAttrs) apply.QueueAttrs
	// restoreTarget, when set, wraps what the restore at stop writes to.
	restoreTarget func(apply.QueueAttrs) apply.QueueAttrs
	// probeStep, when set, is called as a probe goes: "queued" (in the
	// pass that queued it, before that pass writes), "waiting for the
	// pass" (the probe's goroutine, before it waits for that pass to
	// end), "measuring" (passes now skip the disk).
	probeStep func(name, step string)
	// passDone, when set, is called as each pass over a disk ends, its
	// writes made and its outcome noted for the state file: a test that
	// asserts on what a pass did not write knows when to look.
	passDone func(name string)
	// owed, when set, is called with what is owed to a disk after each
	// ask merges into it (kick), under the queue's lock: it must return
	// at once.
	owed func(name string, j job)
	// adaptGap, when set, is called for each sample of an adaptive disk
	// not given to its controller because a probe held the disk.
	adaptGap func(name string)
	// adaptSampled, when set, is called after each sample of an adaptive
	// disk with its operating point, the controller's decision and the
	// scheduler the sample was taken under.
	adaptSampled func(name string, p observe.Point, dec adapt.Decision, scheduler string)
}

// DefaultStopTimeout is Config.StopTimeout's default.
const DefaultStopTimeout = 10 * time.Second

// withDefaults checks cfg and fills in the defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Load == nil {
		cfg.Load = policy.Load
	}
	if cfg.FS.Root() == "" {
		fs, err := sysfs.NewFS("")
		if err != nil {
			return cfg, err
		}
		cfg.FS = fs
	}
	if cfg.DevDir == "" {
		cfg.DevDir = paths.Default.Dev
	}
	switch cfg.UeventSource {
	case "", "kernel", "udev":
	default:
		return cfg, fmt.Errorf("uevent source %q: must be kernel or udev", cfg.UeventSource)
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
	if cfg.hooks.dial == nil {
		cfg.hooks.dial = uevent.Dial
		cfg.hooks.privateNetNS = uevent.PrivateNetNS
		if cfg.hooks.followDial == nil {
			cfg.hooks.followDial = uevent.Dial
		}
	}
	if cfg.hooks.evaluate == nil {
		cfg.hooks.evaluate = (*policy.Policy).EvaluateUntil
	}
	if cfg.hooks.stateDebounce <= 0 {
		cfg.hooks.stateDebounce = 250 * time.Millisecond
	}
	return cfg, nil
}
