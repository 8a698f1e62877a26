package daemon

import (
	"fmt"
	"strings"
	"time"

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
	var b strings.Builder
	fmt.Fprintf(&b, "STATUS=%d disks managed", managed)
	if c := d.report.lastChange; c != nil {
		fmt.Fprintf(&b, "; last change %s %s %s %s->%s", c.At.Format(time.TimeOnly), c.Device, c.Attribute, c.From, c.To)
	}
	if r := d.report.lastReload(); r != nil && !r.OK {
		fmt.Fprintf(&b, "; policy reload FAILED at %s, previous policy in force", r.At.Format(time.TimeOnly))
	}
	if e := d.report.lastError; e != nil {
		msg := e.Message
		if e.Device != "" {
			msg = e.Device + ": " + msg
		}
		fmt.Fprintf(&b, "; last error %s %s", e.At.Format(time.TimeOnly), firstLine(msg))
	}
	if d.report.udevWarning != "" {
		b.WriteString("; WARNING no udevd runs")
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
