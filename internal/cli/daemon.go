package cli

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/daemon"
	"github.com/iosched/iosched/internal/journallog"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/procs"
)

func newDaemonCmd(e *env) *cobra.Command {
	var (
		ueventSource, runtimeDir, stateDir, logLevel string
		parallel                                     int
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Keep every disk on its policy: at start, on hot-plug, after a reload, against drift",
		Long: `iosched daemon applies the policy to every disk at start, then to every disk
that appears or changes (kernel uevents; --uevent-source udev for udevd's, which
carry the udev properties match.property tests; in kernel mode it also hears
udevd's processed events and checks a disk again, read-only, once udevd is done
with it, so a udev rule that writes a queue setting cannot undo the policy;
the rule is named from the rules under --root), re-plans every disk on SIGHUP
(an invalid policy leaves the old one in force), and every
[daemon] reconcile_interval (default 60s; "0" turns it off) re-reads the
settings the policy makes and repairs drift: a few small reads a disk and no
write when nothing drifted, so 1000 disks cost milliseconds a minute.
SIGUSR1 starts a reconcile at once.

It follows its policy files (inotify): an edit, a new file in policy.d/, and
a Kubernetes ConfigMap update (kubelet's swap of the ..data symlink) reload
the policy as SIGHUP does, once the files have been quiet for 250 ms. Only
the files that make up the policy (and the links and directories leading to
them) are followed: other files beside them, a log file included, are not. An
invalid policy leaves the old one in force and the log, iosched status and
the metrics say why. With [daemon] metrics_file set, it writes its counts
there in the Prometheus text format for node_exporter's textfile collector
(at most once a second, only when something changed; a reload may move or
stop it; a file no longer written, after a reload or a stop, is removed, and
a failing write is logged once): disks managed, changes, apply errors, drift
repairs, uevents, rescans, lost uevents, reloads, policy load errors, and
the time from a disk's uevent to its settings applied.

With --uevent-source udev it refuses to start (exit 2) in a network namespace
of its own (systemd's PrivateNetwork=yes, unshare -n), where udevd's events
cannot reach it: run it in the host's namespace (the unit's drop-in
/usr/share/iosched/udev-mode.conf does so) or use uevent_source = "kernel",
whose events do reach it there.

A "remove" uevent makes it forget a disk only when sysfs shows the disk gone;
one still there is read again. A write the kernel refuses (EINVAL) is retried
after a minute, then twice as long each time up to an hour, logged again only
when the failure changes, and shown in iosched status meanwhile. With
--uevent-source udev and no udevd running (nothing answers on
/run/udev/control), it warns in the log and in iosched status, and still
scans and reconciles.

Kernel uevents not sent by the kernel (forged) are dropped. A burst larger than
the socket's buffer (ENOBUFS) makes it rescan every disk; any other socket error,
reconnect with backoff, then rescan. While udevd runs and one of its rules writes
a setting the policy makes on a new or changed disk, the disk is left to udevd
first and written once udevd is done with it (at most 2 s later): one scheduler
switch instead of three, and never two at once on one queue (two at once can
crash the kernel). SIGHUP's policy is read
off the event loop (a read that takes over 10 s is refused); iosched reload sends
SIGHUP and waits until every disk is re-planned.

A disk a rule with [rule.probe] matches is decided by a remembered probe
(STATE-DIR/probes.json, or [daemon] probe_results) younger than max_age; without
one it gets the rule's other settings at once (its [rule.set] scheduler as the
interim value) and its probe is queued: probe_concurrency at once, off the
passes, none that would overrun what is left of probe_budget. A busy disk is
tried again a minute later. While a disk is probed the daemon writes nothing to
it; a reload or the disk's removal cancels its probe, which first puts back what
it changed, and the start restores what a killed probe left. A probe that
failed is not run again by a reload with the same probe settings before a
backoff: 5 minutes, doubling with each failure in a row, at most 6 hours.

A disk a rule with [rule.adapt] matches, whose probe decision has curves, is
followed: every sample (default 5s) one read of /sys/block/DEV/stat gives the
requests it had in flight while busy, and when the probe's curves favour the
other candidate by more than margin at that depth over a whole window, the
daemon switches it with an ordinary pass, the rule shown with the reason
("x (adapt: busy depth 23 over 10m; curve: none 1.52x mq-deadline at depth
23)"); that choice is then the disk's wanted scheduler, which drift repair keeps,
until the next switch, also after a restart. Not while a probe holds the disk:
the window starts again after it. A reload keeps a disk's window when its
rule, the rule's options and the probe's curves are unchanged; its switch
history (what min_interval, max_switches_per_day and the guard's pin count)
is kept in any case, in STATE-DIR/adapt.json, so the limits hold over any 24
hours across restarts and reloads. With no adaptive disk nothing is sampled
and no timer runs. iosched status shows each one's depth, verdict and switches;
the metrics file counts the switches (iosched_adapt_switches_total) and shows
each one's busy depth.

It speaks systemd's notify protocol (READY, RELOADING, STOPPING, STATUS, WATCHDOG)
and logs to the journal with DEVICE=, ATTRIBUTE=, FROM=, TO=, RULE= fields when
stderr is the journal. Its state is in RUNTIME-DIR/state.json: see iosched status.
It holds an exclusive lock on RUNTIME-DIR/lock: a second daemon on the same
runtime directory exits 1 at once, naming the running one's pid. A runtime
directory it cannot write (read-only) keeps it from starting, since status and
reload could not find it.

On SIGTERM or SIGINT it abandons the scans and re-plans under way (also the one
at start: it then exits without ever telling systemd it was ready), finishes the
writes in flight (at most 10 s) and exits 0 (1 when restore_on_exit could
not put every disk back, below).
The settings stay as they are: they are what the policy wants, and a restart or
an upgrade must not flap every disk through the kernel defaults and back (each
scheduler switch freezes the disk's queue). With [daemon] restore_on_exit = true
it puts back the values it found before changing them. Each is remembered in
STATE-DIR/originals.json before the first change made while restore_on_exit is
on, and never overwritten, so a crash and restart does not lose it; the
generation before the last write is kept as originals.json.prev. An
originals.json that cannot be read is never written over: it is renamed
originals.json.unreadable-TIME and the previous generation read instead. Disks
neither covers whose settings are already the policy's have unknown original
values: the log and iosched status name them, and at stop they count as failed
in the "original values restored" summary while what is known is put back. A
disk whose write is still hanging at stop is not restored (the two would race);
its values stay remembered for the next stop. A stop that leaves any disk not
restored (a write that failed or hangs, values unknown) logs it and exits 1.
The whole stop takes at most 23 s (the unit's TimeoutStopSec is above that),
but a write to a disk whose queue is
frozen behind I/O the disk does not answer waits in the kernel uninterruptibly
(blk_mq_freeze_queue_wait): the log names the disk, and the process exits only
when the disk answers, whatever signal it gets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return &ExitError{Code: 2, Msg: fmt.Sprintf("--log-level %q: want debug, info, warn or error", logLevel)}
			}
			fs, err := e.fs()
			if err != nil {
				return err
			}
			d, err := daemon.New(daemon.Config{
				PolicyPath:   e.policy,
				FS:           fs,
				DevDir:       e.devDir,
				UeventSource: ueventSource,
				RuntimeDir:   runtimeDir,
				StateDir:     stateDir,
				LockFile:     e.lockFile,
				Parallel:     parallel,
				RulesRoot:    e.root,
				Logger:       journallog.New(e.stderr, level),
				Version:      version(),
			})
			if err != nil {
				return &ExitError{Code: 2, Msg: err.Error()}
			}
			procs.SetForDaemon()
			stopProfile, err := startDebugProfile()
			if err != nil {
				return err
			}
			err = d.Run(cmd.Context())
			if perr := stopProfile(); perr != nil {
				fmt.Fprintln(e.stderr, "profiles:", perr)
			}
			if errors.Is(err, daemon.ErrUdevUnreachable) {
				return &ExitError{Code: 2, Msg: err.Error()}
			}
			var pe *daemon.PolicyError
			if errors.As(err, &pe) {
				// What iosched check says: FILE:LINE:COL: rule N "x": key: message.
				var errs policy.Errors
				if !errors.As(pe.Err, &errs) {
					errs = policy.Errors{{Msg: pe.Err.Error()}}
				}
				for _, pe := range errs {
					fmt.Fprintln(e.stderr, pe.Error())
				}
				return &ExitError{Code: 1, Msg: fmt.Sprintf("the policy is invalid: %d error(s)", len(errs))}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&ueventSource, "uevent-source", "", `"kernel" or "udev" (default: the policy's [daemon] uevent_source, else kernel)`)
	f.StringVar(&runtimeDir, "runtime-dir", paths.Default.Runtime, "where state.json is kept")
	f.StringVar(&stateDir, "state-dir", paths.Default.State, "where what must survive a restart is kept (original values for restore_on_exit)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.IntVar(&parallel, "parallel", daemon.DefaultParallel, "how many disks are handled at once")
	return cmd
}
