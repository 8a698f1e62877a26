package daemon

import (
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// loop is what Run keeps between two events: which scan runs and which is
// asked for next, the reload waiting for its re-plan, the reconcile and
// watchdog tickers, the debounced state file, the thread release.
type loop struct {
	d         *Daemon
	reconcile <-chan time.Time
	stopTick  func()
	watchdog  <-chan time.Time
	stopDog   func()
	flush     <-chan time.Time
	release   <-chan time.Time
	status    string // the last STATUS= sent

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
}

func (d *Daemon) newLoop() *loop {
	l := &loop{d: d, stopDog: func() {}}
	l.reconcile, l.stopTick = ticker(d.policy.Load().Daemon.ReconcileInterval)
	// Pinged from the loop itself, so a loop stuck anywhere stops the
	// pings and systemd restarts the daemon.
	if iv, err := sd.SdWatchdogEnabled(false); err != nil {
		d.log.Warn("watchdog", "error", err)
	} else if iv > 0 {
		l.watchdog, l.stopDog = ticker(iv / 2)
	}
	return l
}

func (l *loop) stop() {
	l.stopTick()
	l.stopDog()
}

func (l *loop) resetReconcile() {
	l.stopTick()
	l.reconcile, l.stopTick = ticker(l.d.policy.Load().Daemon.ReconcileInterval)
}

// scan starts a scan unless one runs; then the next one, started when it
// ends, covers every request made meanwhile.
func (l *loop) scan(kind passKind, reason string) {
	if l.scanning {
		if !l.nextOwed || kind > l.nextKind {
			l.nextKind, l.nextReason = kind, reason
		}
		l.nextOwed = true
		return
	}
	l.scanning = true
	reloads := l.reloads
	go func() {
		r := l.d.scan(kind, reason)
		r.reloads = reloads
		l.d.scanDone <- r
	}()
}

// reload re-reads the policy (systemd hears RELOADING=1) and re-plans every
// disk under a valid one. READY=1 follows once no reload is left to
// re-plan: once a scan started after the last valid reload is done,
// whatever its reason (a full rescan asked for meanwhile takes the reload's
// place); at once after an invalid policy if none is.
func (l *loop) reload() {
	if !l.d.reload() {
		if l.replanned == l.reloads {
			l.ready()
		}
		return
	}
	l.resetReconcile()
	l.reloads++
	l.scan(verify, "reload")
}

func (l *loop) ready() { l.d.notify(sd.SdNotifyReady + "\n" + l.d.statusLine()) }

func (l *loop) scanned(r scanResult) {
	l.scanning = false
	l.d.noteScan(r)
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

// flushSoon writes the state file a little later, so that 1000 disks
// changing at once make a few writes, not 1000.
func (l *loop) flushSoon() {
	if l.flush == nil {
		l.flush = time.After(l.d.cfg.stateDebounce)
	}
}

// releaseSoon ends the threads a burst left behind shortly (releaseDelay),
// unless another burst is running by then (its own end asks again).
func (l *loop) releaseSoon() {
	l.release = time.After(releaseDelay)
}

// releaseDelay: long enough that the queue going idle for a moment in the
// middle of a burst (the next events not read yet) does not end threads
// about to be needed again, short enough that the burst's memory is not
// still held when the next thing comes (the reconcile after it, say). Held
// 1 s, a rescan 0.3 s after a burst of 1000 disks took VmRSS from 18.7 to
// 20.5 MiB; released first, 12.9.
const releaseDelay = 100 * time.Millisecond

func (l *loop) flushNow() {
	l.flush = nil
	l.d.writeState()
	if s := l.d.statusLine(); s != l.status {
		l.status = s
		l.d.notify(s)
	}
}

func ticker(every time.Duration) (<-chan time.Time, func()) {
	if every <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}
