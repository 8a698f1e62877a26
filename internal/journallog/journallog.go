package journallog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/journal"
)

// New logs to the journal with native fields (DEVICE=, ATTRIBUTE=, FROM=,
// TO=, RULE=, ...) when stderr is connected to it, so
// `journalctl -u iosched DEVICE=vda` works; otherwise text lines to stderr.
func New(stderr io.Writer, level slog.Level) *slog.Logger {
	if f, ok := stderr.(*os.File); ok && f.Fd() == 2 {
		if yes, _ := journal.StderrIsJournalStream(); yes {
			return slog.New(&handler{level: level, send: journal.Send, fallback: slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})})
		}
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// handler sends each record as one journal entry: MESSAGE is the
// message followed by its attributes as key=value (what `journalctl` shows),
// and every attribute is also a field of its own, its key upper-cased.
type handler struct {
	level    slog.Leveler
	attrs    []slog.Attr
	prefix   string // group names, "A_B_"
	send     func(msg string, p journal.Priority, vars map[string]string) error
	fallback slog.Handler // used when the journal socket refuses
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	vars := map[string]string{"SYSLOG_IDENTIFIER": "iosched"}
	var msg strings.Builder
	msg.WriteString(r.Message)
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		if a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				add(prefix+a.Key+"_", g)
			}
			return
		}
		v := a.Value.String()
		fmt.Fprintf(&msg, " %s%s=%s", strings.ToLower(prefix), a.Key, quote(v))
		if field := journalField(prefix + a.Key); field != "" {
			vars[field] = v
		}
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(h.prefix, a)
		return true
	})
	if err := h.send(msg.String(), priority(r.Level), vars); err != nil {
		return h.fallback.Handle(ctx, r)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), prefixed(h.prefix, as)...)
	c.fallback = h.fallback.WithAttrs(as)
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "_"
	c.fallback = h.fallback.WithGroup(name)
	return &c
}

func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

// journalField turns an attribute key into a journal field name: upper
// case letters, digits and '_', not starting with '_' (reserved to
// journald) or a digit.
func journalField(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), "_0123456789")
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	default:
		return journal.PriDebug
	}
}

func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=\n") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
