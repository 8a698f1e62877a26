package conflicts

import (
	"fmt"
	"strings"
	"unicode"
)

// tunedOption is one key=value of a profile, with where it was written.
type tunedOption struct {
	value string
	file  string
	line  int
}

// tunedSection is one [section] of a tuned.conf: its options in the order
// Python's ConfigParser keeps them (first appearance; a repeated key keeps
// its place and takes the later value).
type tunedSection struct {
	name string
	keys []string
	opts map[string]tunedOption
}

func (s *tunedSection) set(key string, o tunedOption) {
	if _, ok := s.opts[key]; !ok {
		s.keys = append(s.keys, key)
	}
	s.opts[key] = o
}

// parseTunedConf reads text as tuned 2.20 does (tuned/profiles/loader.py
// _load_config_data: Python 3's configparser.ConfigParser with
// delimiters '=', inline comments '#', strict=False, keys kept as written).
// Where Python's parser raises, so does this: tuned then refuses the whole
// profile ("Cannot parse"). With noValue a line without '=' is a key
// without a value (allow_no_value, as tuned reads a variables file); the
// key is then left out. firstLine is the number of text's first line.
func parseTunedConf(path, text string, noValue bool, firstLine int) ([]*tunedSection, error) {
	var (
		sections    []*tunedSection
		cur         *tunedSection
		optname     string
		optLines    []string // the current option's value lines
		optLine     int
		indentLevel int
		errs        []string
	)
	byName := map[string]*tunedSection{}
	flush := func() {
		if cur != nil && optname != "" && optLines != nil {
			// configparser _join_multiline_values.
			o := cur.opts[optname]
			o.value = strings.TrimRightFunc(strings.Join(optLines, "\n"), unicode.IsSpace)
			o.line = optLine
			cur.opts[optname] = o
		}
	}
	lines := strings.Split(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, line := range lines {
		lineno := firstLine + i
		commentStart := -1
		// An inline '#' starts a comment at the line's start or after a
		// blank.
		for j := 0; j < len(line); j++ {
			if line[j] == '#' && (j == 0 || isPySpace(line[j-1])) {
				commentStart = j
				break
			}
		}
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, ";") {
			commentStart = 0
		}
		value := line
		if commentStart >= 0 {
			value = line[:commentStart]
		}
		value = strings.TrimSpace(value)
		if value == "" {
			// An empty line inside a value is kept (empty_lines_in_values),
			// unless a comment was on it.
			if commentStart < 0 && cur != nil && optname != "" && optLines != nil {
				optLines = append(optLines, "")
			}
			continue
		}
		indent := len(line) - len(strings.TrimLeftFunc(line, unicode.IsSpace))
		if cur != nil && optname != "" && indent > indentLevel {
			if optLines != nil {
				optLines = append(optLines, value)
			}
			continue
		}
		indentLevel = indent
		if name, ok := sectionHeader(value); ok {
			flush()
			optname, optLines = "", nil
			if cur = byName[name]; cur == nil {
				cur = &tunedSection{name: name, opts: map[string]tunedOption{}}
				byName[name] = cur
				sections = append(sections, cur)
			}
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("%s:%d: a line before any [section] (Python's configparser refuses the file): %q", path, lineno, clip(line))
		}
		key, val, found := strings.Cut(value, "=")
		if !found && !noValue {
			errs = append(errs, fmt.Sprintf("%s:%d: %q", path, lineno, clip(line)))
			continue
		}
		key = strings.TrimRightFunc(key, unicode.IsSpace)
		if key == "" {
			errs = append(errs, fmt.Sprintf("%s:%d: %q", path, lineno, clip(line)))
			continue
		}
		flush()
		optname, optLine = key, lineno
		if found {
			optLines = []string{strings.TrimSpace(val)}
			cur.set(key, tunedOption{value: strings.TrimSpace(val), file: path, line: lineno})
		} else {
			optLines = nil
			if _, ok := cur.opts[key]; ok {
				// A valueless key replaces a value; such a key is no
				// variable and no option tuned uses.
				delete(cur.opts, key)
				cur.keys = removeString(cur.keys, key)
			}
		}
	}
	flush()
	if len(errs) > 0 {
		return nil, fmt.Errorf("lines Python's configparser cannot parse (so tuned refuses the profile): %s", strings.Join(errs, ", "))
	}
	// [DEFAULT] is no section: its options are every section's too, after
	// the section's own, which win (configparser options() and get()).
	if def := byName["DEFAULT"]; def != nil {
		var out []*tunedSection
		for _, s := range sections {
			if s == def {
				continue
			}
			for _, k := range def.keys {
				if _, ok := s.opts[k]; !ok {
					s.set(k, def.opts[k])
				}
			}
			out = append(out, s)
		}
		sections = out
	}
	return sections, nil
}

// sectionHeader matches configparser's SECTCRE, `\[(?P<header>.+)\]`,
// at the start of the (stripped) line: the header runs to the last ']'.
func sectionHeader(v string) (string, bool) {
	if len(v) < 3 || v[0] != '[' {
		return "", false
	}
	end := strings.LastIndexByte(v, ']')
	if end < 2 {
		return "", false
	}
	return v[1:end], true
}

func isPySpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

func removeString(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// expandProfileDir replaces ${i:PROFILE_DIR} not preceded by a backslash
// with the profile's directory, as tuned's loader does when it reads a
// file.
func expandProfileDir(dir, s string) string {
	const tok = "${i:PROFILE_DIR}"
	var b strings.Builder
	for {
		i := strings.Index(s, tok)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		if i > 0 && s[i-1] == '\\' {
			b.WriteString(tok)
		} else {
			b.WriteString(dir)
		}
		s = s[i+len(tok):]
	}
}

// clip shortens a line quoted in an error to its start.
func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
