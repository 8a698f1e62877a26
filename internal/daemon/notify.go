package daemon

import (
	sd "github.com/coreos/go-systemd/v22/daemon"
)

// notify sends one sd_notify message; without NOTIFY_SOCKET it does nothing.
func (d *Daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.Debug("sd_notify", "error", err)
	}
}

// statusLine is the one-line STATUS= systemd shows.
func (d *Daemon) statusLine() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	managed := 0
	for _, rec := range d.disks {
		if len(rec.state.Rules) > 0 {
			managed++
		}
	}
	return d.report.StatusLine(managed)
}
