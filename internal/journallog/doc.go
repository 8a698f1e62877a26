// Package journallog is the daemon's slog handler: each record goes to the
// systemd journal as one entry whose attributes are also journal fields of
// their own (DEVICE=vda), when stderr is the journal; text lines otherwise.
package journallog
