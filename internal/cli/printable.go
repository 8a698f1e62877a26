package cli

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable makes text read from sysfs (a model, a serial, a map name, an
// attribute's value, a disk's name) or from a policy safe to print on a
// terminal: control characters (ESC, NUL, tab, newline, DEL, C1),
// invisible format characters (a right-to-left override) and bytes that
// are not UTF-8 are written as Go escapes (\x1b, \u202e), and a backslash
// as \\ so an escape is never ambiguous. A device can put any bytes in its
// model or serial; printed raw, an ESC reaches the terminal and a tab or a
// newline breaks the table. JSON output escapes them already.
func printable(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x80: // \x is kept for bytes; a valid rune above is \u
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// printableLines is printable for text of several lines, such as an
// error errors.Join made (its errors one a line): each line is made
// printable and the lines after the first are indented under it, where
// printable alone would run them together with a literal \x0a.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n  ")
}

// Printable is printable for other programs' commands (fleetcli).
func Printable(s string) string { return printable(s) }

// PrintableLines is printableLines for other programs' commands.
func PrintableLines(s string) string { return printableLines(s) }
