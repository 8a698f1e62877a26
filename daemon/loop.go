package daemon

import (
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// timers is the loop's clockwork: the reconcile and watchdog tickers, the
// debounced state file, and the one scan allowed at a time.
type timers struct {
	d         *Daemon
	reconcile <-chan time.Time
	stopTick  func()
	watchdog  <-chan time.Time
	stopDog   func()
	flush     <-chan time.Time
	release   <-chan time.Time
	status    string // the last STATUS= sent

	scanning    bool
	again       passKind // -1: no scan asked for while one ran
	againReason string
	// readyOwed: a reload was taken, and systemd hears READY=1 once a
	// scan started after it is done.
	readyOwed bool
}

func (d *Daemon) newTimers() *timers {
	t := &timers{d: d, again: -1, stopDog: func() {}}
	t.reconcile, t.stopTick = ticker(d.policy.Load().Daemon.ReconcileInterval)
	// Pinged from the loop itself, so a loop stuck anywhere stops the
	// pings and systemd restarts the daemon.
	if iv, err := sd.SdWatchdogEnabled(false); err != nil {
		d.log.Warn("watchdog", "error", err)
	} else if iv > 0 {
		t.watchdog, t.stopDog = ticker(iv / 2)
	}
	return t
}

func (t *timers) stop() {
	t.stopTick()
	t.stopDog()
}

func (t *timers) resetReconcile() {
	t.stopTick()
	t.reconcile, t.stopTick = ticker(t.d.policy.Load().Daemon.ReconcileInterval)
}

// scan starts a scan unless one runs; then the next one, started when it
// ends, covers every request made meanwhile.
func (t *timers) scan(kind passKind, reason string) {
	if t.scanning {
		if kind > t.again {
			t.again, t.againReason = kind, reason
		}
		return
	}
	t.scanning = true
	reload := t.readyOwed
	t.readyOwed = false
	go func() {
		r := t.d.scan(kind, reason)
		r.reload = reload
		t.d.scanDone <- r
	}()
}

// reloaded re-plans every disk under the new policy.
// READY=1 follows once a scan started after the reload is done, whatever
// its reason (a full rescan asked for meanwhile takes the reload's place).
func (t *timers) reloaded() {
	t.resetReconcile()
	t.readyOwed = true
	t.scan(verify, "reload")
}

func (t *timers) scanned(r scanResult) {
	t.scanning = false
	t.d.noteScan(r)
	if r.reload {
		t.d.notify(sd.SdNotifyReady + "\n" + t.d.statusLine())
	}
	if t.again >= 0 {
		kind, reason := t.again, t.againReason
		t.again = -1
		t.scan(kind, reason)
	}
}

// flushSoon writes the state file a little later, so that 1000 disks
// changing at once make a few writes, not 1000.
func (t *timers) flushSoon() {
	if t.flush == nil {
		t.flush = time.After(t.d.cfg.stateDebounce)
	}
}

// releaseSoon ends the threads a burst left behind, unless another burst
// comes within a second.
func (t *timers) releaseSoon() {
	t.release = time.After(time.Second)
}

func (t *timers) flushNow() {
	t.flush = nil
	t.d.writeState()
	if s := t.d.statusLine(); s != t.status {
		t.status = s
		t.d.notify(s)
	}
}

func ticker(every time.Duration) (<-chan time.Time, func()) {
	if every <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}
