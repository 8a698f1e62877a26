package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/statefile"
)

// eventLoop is what Run keeps between two events: which scan runs and
// which is asked for next, the policy load under way, the reload waiting
// for its re-plan. Timers, the state file and the thread release are
// background tasks (background.go) that ask the loop through Daemon.asks.
type eventLoop struct {
	d *Daemon

	scanning bool
	// next is a scan asked for while one ran (when nextOwed): the
	// strongest kind asked for, and the reason of that request.
	nextOwed   bool
	nextKind   passKind
	nextReason string
	// reloads counts the valid policies taken on SIGHUP; replanned, those
	// a finished scan was started after. While replanned < reloads, a
	// reload is still being re-planned, and systemd must not hear READY=1.
	reloads, replanned int
	// started: the start scan is done; tasksUp: every task Run started
	// is ready (askTasksReady). READY=1 is never sent before both.
	started bool
	tasksUp bool

	// loading: a policy load runs (the loadSeq'th), for requests; its
	// answer is refused if it has not come within LoadTimeout.
	// reloadOwed: a SIGHUP came meanwhile, and another load follows this
	// one.
	loading    bool
	loadSeq    int
	requests   []string
	reloadOwed bool
}

// scan starts a scan unless one runs; then the next one, started when it
// ends, covers every request made meanwhile.
func (l *eventLoop) scan(kind passKind, reason string) {
	if l.scanning {
		if !l.nextOwed || kind > l.nextKind {
			l.nextKind, l.nextReason = kind, reason
		}
		l.nextOwed = true
		return
	}
	l.scanning = true
	reloads := l.reloads
	l.d.tasks.Do("scan", func(context.Context) {
		r := l.d.scan(kind, reason)
		r.reloads = reloads
		l.d.scanDone <- r // buffered: one scan runs at a time
	})
}

// reload starts reading the policy off the loop (systemd hears RELOADING=1),
// for the `iosched reload` requests made so far; a SIGHUP while a load runs
// makes another follow it.
func (l *eventLoop) reload() {
	if l.loading {
		l.reloadOwed = true
		return
	}
	l.d.notify(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec())
	l.loading = true
	l.loadSeq++
	l.requests = l.d.takeReloadRequests()
	l.d.load(l.loadSeq, nil)
}

// loaded takes the policy a reload read, and re-plans every disk under a
// valid one. READY=1 follows once no reload is left to re-plan: once a scan
// started after the last valid reload is done, whatever its reason (a full
// rescan asked for meanwhile takes the reload's place); at once after an
// invalid policy if none is.
func (l *eventLoop) loaded(r loadResult) {
	if !l.loading || r.seq != l.loadSeq {
		return // a load given up on
	}
	if r.timedOut {
		l.loadTimedOut()
		return
	}
	l.finishLoad(r.pol, r.err)
}

// loadTimedOut refuses a load that took longer than LoadTimeout (a policy
// file on a hung network filesystem, say); its late answer is dropped.
func (l *eventLoop) loadTimedOut() {
	l.d.log.Error("reading the policy did not finish in time; the load is abandoned", "timeout", l.d.cfg.LoadTimeout)
	l.finishLoad(nil, fmt.Errorf("%w within %s", errLoadTimeout, l.d.cfg.LoadTimeout))
}

func (l *eventLoop) finishLoad(pol *policy.Policy, err error) {
	l.loading = false
	requests := l.requests
	l.requests = nil
	if !l.d.reloaded(pol, err, requests) {
		if l.replanned == l.reloads {
			l.ready()
		}
	} else {
		l.d.resetReconcile()
		l.reloads++
		l.scan(settingsOnly, "reload")
	}
	if l.reloadOwed {
		l.reloadOwed = false
		l.reload()
	}
}

// tasksReady notes that every task Run started is ready, and tells systemd
// when nothing else is awaited.
func (l *eventLoop) tasksReady() {
	l.tasksUp = true
	if l.replanned == l.reloads {
		l.ready()
	}
}

// ready tells systemd the daemon is ready, once the start scan is done and
// every task is ready.
func (l *eventLoop) ready() {
	if l.started && l.tasksUp {
		l.d.notify(sd.SdNotifyReady + "\n" + l.d.statusLine())
	}
}

func (l *eventLoop) scanned(r scanResult) {
	l.scanning = false
	l.d.noteScan(r)
	if r.reason == "start" {
		l.started = true
		l.d.log.Info("ready", "disks", l.d.count(), "policy", l.d.policy.Load().Sources, "uevents", l.d.ueventSource(l.d.policy.Load()))
		close(l.d.ready)
		if l.replanned == l.reloads {
			l.ready()
		}
	}
	if r.reloads > l.replanned {
		l.replanned = r.reloads
		if l.replanned == l.reloads {
			l.d.noteReplanned()
			l.ready()
		}
	}
	if l.nextOwed {
		l.nextOwed = false
		l.scan(l.nextKind, l.nextReason)
	}
}

// takeReloadRequests lists and removes the pending `iosched reload`
// requests (statefile.ReloadRequestDir): the load about to start answers
// them.
func (d *Daemon) takeReloadRequests() []string {
	dir := statefile.ReloadRequestDir(d.cfg.RuntimeDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.log.Error("reading the reload requests; they stay unanswered", "dir", dir, "error", err)
		}
		return nil
	}
	var ids []string
	for _, e := range entries {
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

func ticker(every time.Duration) (<-chan time.Time, func()) {
	if every <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}

// asked does what a background task asked.
func (l *eventLoop) asked(a ask) {
	switch a {
	case askReconcile:
		l.d.checkUdev()
		l.scan(settingsOnly, "reconcile")
	case askReload:
		l.reload()
	case askTasksReady:
		l.tasksReady()
	case askWatchdog:
		l.d.notify(sd.SdNotifyWatchdog)
	}
}
