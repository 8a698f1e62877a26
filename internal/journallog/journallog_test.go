package journallog

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

type journalEntry struct {
	msg  string
	prio journal.Priority
	vars map[string]string
}

func TestJournalHandlerSendsFields(t *testing.T) {
	t.Parallel()
	var got []journalEntry
	var text strings.Builder
	h := &handler{
		level: slog.LevelInfo,
		send: func(msg string, p journal.Priority, vars map[string]string) error {
			got = append(got, journalEntry{msg, p, vars})
			return nil
		},
		fallback: slog.NewTextHandler(&text, nil),
	}
	log := slog.New(h)
	log.Warn("drift repaired", "device", "vda", "attribute", "scheduler", "from", "none", "to", "mq-deadline", "rule", "virtio disks")
	log.Debug("not sent")
	log.With("component", "uevents").WithGroup("socket").Error("failed", "error", errors.New("EBADF"))
	if len(got) != 2 {
		t.Fatalf("%d entries sent, want 2 (debug is below the level)", len(got))
	}
	e := got[0]
	want := map[string]string{"DEVICE": "vda", "ATTRIBUTE": "scheduler", "FROM": "none", "TO": "mq-deadline", "RULE": "virtio disks", "SYSLOG_IDENTIFIER": "iosched"}
	for k, v := range want {
		if e.vars[k] != v {
			t.Errorf("field %s = %q, want %q", k, e.vars[k], v)
		}
	}
	if e.prio != journal.PriWarning {
		t.Errorf("priority %d, want warning", e.prio)
	}
	if e.msg != `drift repaired device=vda attribute=scheduler from=none to=mq-deadline rule="virtio disks"` {
		t.Errorf("MESSAGE = %q", e.msg)
	}
	if e := got[1]; e.prio != journal.PriErr || e.vars["COMPONENT"] != "uevents" || e.vars["SOCKET_ERROR"] != "EBADF" {
		t.Errorf("second entry = %+v", e)
	}

	// The journal refusing: the text fallback says it instead.
	h.send = func(string, journal.Priority, map[string]string) error { return errors.New("no journal") }
	log.Info("set", "device", "vdb")
	if !strings.Contains(text.String(), "msg=set device=vdb") {
		t.Errorf("fallback text = %q", text.String())
	}
}

func TestJournalField(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"device": "DEVICE", "retry_in": "RETRY_IN", "a.b-c": "A_B_C", "_x": "X", "9lives": "LIVES"} {
		if got := journalField(in); got != want {
			t.Errorf("journalField(%q) = %q, want %q", in, got, want)
		}
	}
}
