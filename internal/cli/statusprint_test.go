package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/statefile"
)

// status prints what the state file holds escaped: a scheduler name, a
// disk's name, an error with terminal escape bytes or a newline reach the
// terminal as \x1b and \x0a, never raw. The state itself is not changed
// (--json prints it exact). Before, a scheduler name with escape bytes was
// printed raw.
func TestStatusEscapesTheState(t *testing.T) {
	t.Parallel()
	const evil = "bfq\x1b[2J\x1b]0;owned\x07\n"
	const shown = `bfq\x1b[2J\x1b]0;owned\x07\x0a`
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := &statefile.State{
		PID: 1, Started: now,
		Policy:     statefile.PolicyState{Sources: []string{"/etc/iosched/" + evil}},
		LastChange: &statefile.Change{At: now, Device: "vd" + evil, Attribute: "scheduler", From: "none", To: evil, Rule: evil},
		LastError:  &statefile.Problem{At: now, Device: evil, Message: evil},
		Warnings:   []string{evil},
		Managed:    1,
		Disks: map[string]*statefile.DiskState{
			"vd" + evil: {
				Class:    "virtio",
				Rules:    []string{evil},
				Settings: []statefile.Applied{{Attribute: "scheduler", Value: evil}},
				Probe:    &statefile.ProbeState{Rule: evil, Status: "decided", Winner: evil, Provenance: evil, From: evil},
			},
		},
	}
	var out bytes.Buffer
	if err := renderStatus(&out, st, true, now); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "\x1b\x07") {
		t.Errorf("raw control bytes in the output:\n%q", out.String())
	}
	// Each field that held the string shows it escaped: the source, the
	// change (device, value, rule), the error, the warning, the disk's
	// name, rule, setting and probe.
	if n := strings.Count(out.String(), shown); n < 12 {
		t.Errorf("the string is shown escaped %d times, want every field (12 or more):\n%s", n, out.String())
	}
	if st.LastChange.To != evil || st.Disks["vd"+evil] == nil {
		t.Error("rendering changed the state")
	}
}
