package policy

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The TOML library reports positions for syntax errors only: its per-key
// positions are unexported and, for arrays of tables such as [[rule]], keep
// just the last occurrence of each key. So once a file has parsed, positions
// is a small second pass over the same text that records where every key,
// table header and array element starts, addressed by its path with array
// indices ("rule", "[2]", "match", "class"). It only ever runs on text the
// library accepted, and it gives up quietly (fewer positions, never a panic)
// on anything it does not follow.

// pos is a 1-based line and column (in characters).
type pos struct{ Line, Col int }

// posIndex maps a path (see pathKey) to where it starts.
type posIndex map[string]pos

const pathSep = "\x1f"

// pathKey joins path elements; array indices are elements of the form "[n]".
func pathKey(elems []string) string { return strings.Join(elems, pathSep) }

func indexElem(i int) string { return "[" + strconv.Itoa(i) + "]" }

type posScanner struct {
	src        []byte
	i          int
	lineStarts []int
	idx        posIndex
	// arrays counts the tables of each array of tables seen so far, by
	// resolved path.
	arrays map[string]int
}

// positions indexes where each key of a valid TOML document starts.
func positions(src []byte) posIndex {
	s := &posScanner{src: src, idx: posIndex{}, arrays: map[string]int{}, lineStarts: []int{0}}
	for i, c := range src {
		if c == '\n' {
			s.lineStarts = append(s.lineStarts, i+1)
		}
	}
	s.document()
	return s.idx
}

// lineCol is the 1-based line and column (in characters) of byte offset off.
func lineCol(src []byte, off int) (line, col int) {
	off = min(max(off, 0), len(src))
	start := bytes.LastIndexByte(src[:off], '\n') + 1
	return bytes.Count(src[:start], []byte{'\n'}) + 1, utf8.RuneCount(src[start:off]) + 1
}

func (s *posScanner) posAt(off int) pos {
	line := sort.Search(len(s.lineStarts), func(i int) bool { return s.lineStarts[i] > off }) - 1
	if line < 0 {
		line = 0
	}
	start := s.lineStarts[line]
	if off > len(s.src) {
		off = len(s.src)
	}
	return pos{Line: line + 1, Col: utf8.RuneCount(s.src[start:off]) + 1}
}

func (s *posScanner) record(path []string, off int, overwrite bool) {
	k := pathKey(path)
	if _, ok := s.idx[k]; ok && !overwrite {
		return
	}
	s.idx[k] = s.posAt(off)
}

// recordPrefixes gives every enclosing table of path (below base) the
// position of its first mention, as a dotted key or header implies it.
func (s *posScanner) recordPrefixes(base, path []string, off int) {
	for n := len(base) + 1; n < len(path); n++ {
		s.record(path[:n], off, false)
	}
}

func (s *posScanner) eof() bool { return s.i >= len(s.src) }

func (s *posScanner) peek(n int) byte {
	if s.i+n < len(s.src) {
		return s.src[s.i+n]
	}
	return 0
}

// skipBlank skips spaces and tabs (and a lone \r).
func (s *posScanner) skipBlank() {
	for !s.eof() && (s.src[s.i] == ' ' || s.src[s.i] == '\t' || s.src[s.i] == '\r') {
		s.i++
	}
}

// skipSpace skips blanks, newlines and comments.
func (s *posScanner) skipSpace() {
	for !s.eof() {
		switch s.src[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		case '#':
			s.skipComment()
		default:
			return
		}
	}
}

func (s *posScanner) skipComment() {
	for !s.eof() && s.src[s.i] != '\n' {
		s.i++
	}
}

func (s *posScanner) document() {
	var table []string
	for {
		s.skipSpace()
		if s.eof() {
			return
		}
		start := s.i
		if s.src[s.i] == '[' {
			t, ok := s.header()
			if !ok {
				return
			}
			table = t
		} else if !s.keyValue(table) {
			return
		}
		if s.i <= start { // no progress: not something this scanner follows
			return
		}
	}
}

// header reads [a.b] or [[a.b]] and returns the resolved table path.
func (s *posScanner) header() ([]string, bool) {
	start := s.i
	array := s.peek(1) == '['
	if array {
		s.i += 2
	} else {
		s.i++
	}
	keys, ok := s.key()
	if !ok {
		return nil, false
	}
	s.skipBlank()
	closing := "]"
	if array {
		closing = "]]"
	}
	if !strings.HasPrefix(string(s.src[s.i:min(len(s.src), s.i+len(closing))]), closing) {
		return nil, false
	}
	s.i += len(closing)
	var resolved []string
	for j, k := range keys {
		resolved = append(resolved, k)
		last := j == len(keys)-1
		if last && array {
			full := pathKey(resolved)
			n := s.arrays[full]
			s.arrays[full] = n + 1
			resolved = append(resolved, indexElem(n))
			break
		}
		// An array of tables named on the way refers to its last table.
		if n, ok := s.arrays[pathKey(resolved)]; ok {
			resolved = append(resolved, indexElem(n-1))
		}
	}
	s.recordPrefixes(nil, resolved, start)
	s.record(resolved, start, array)
	return resolved, true
}

// keyValue reads one "key = value" below table.
func (s *posScanner) keyValue(table []string) bool {
	start := s.i
	keys, ok := s.key()
	if !ok {
		return false
	}
	s.skipBlank()
	if s.eof() || s.src[s.i] != '=' {
		return false
	}
	s.i++
	s.skipBlank()
	path := append(append([]string{}, table...), keys...)
	s.recordPrefixes(table, path, start)
	s.record(path, start, true)
	return s.value(path)
}

// key reads a possibly dotted key of bare, "basic" or 'literal' parts.
func (s *posScanner) key() ([]string, bool) {
	var parts []string
	for {
		s.skipBlank()
		if s.eof() {
			return nil, false
		}
		switch c := s.src[s.i]; {
		case c == '"':
			raw, ok := s.basicString()
			if !ok {
				return nil, false
			}
			if u, err := strconv.Unquote(raw); err == nil {
				parts = append(parts, u)
			} else {
				parts = append(parts, raw[1:len(raw)-1])
			}
		case c == '\'':
			raw, ok := s.literalString()
			if !ok {
				return nil, false
			}
			parts = append(parts, raw[1:len(raw)-1])
		case isBare(c):
			j := s.i
			for j < len(s.src) && isBare(s.src[j]) {
				j++
			}
			parts = append(parts, string(s.src[s.i:j]))
			s.i = j
		default:
			return nil, false
		}
		s.skipBlank()
		if s.eof() || s.src[s.i] != '.' {
			return parts, true
		}
		s.i++
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// value skips one value, recording the elements of arrays and the keys of
// inline tables below path.
func (s *posScanner) value(path []string) bool {
	if s.eof() {
		return false
	}
	switch s.src[s.i] {
	case '"':
		if s.peek(1) == '"' && s.peek(2) == '"' {
			return s.multiline('"')
		}
		_, ok := s.basicString()
		return ok
	case '\'':
		if s.peek(1) == '\'' && s.peek(2) == '\'' {
			return s.multiline('\'')
		}
		_, ok := s.literalString()
		return ok
	case '[':
		s.i++
		for n := 0; ; n++ {
			s.skipSpace()
			if s.eof() {
				return false
			}
			if s.src[s.i] == ']' {
				s.i++
				return true
			}
			elem := append(append([]string{}, path...), indexElem(n))
			s.record(elem, s.i, true)
			if !s.value(elem) {
				return false
			}
			s.skipSpace()
			if !s.eof() && s.src[s.i] == ',' {
				s.i++
			}
		}
	case '{':
		s.i++
		for {
			s.skipSpace()
			if s.eof() {
				return false
			}
			if s.src[s.i] == '}' {
				s.i++
				return true
			}
			start := s.i
			if !s.keyValue(path) || s.i <= start {
				return false
			}
			s.skipSpace()
			if !s.eof() && s.src[s.i] == ',' {
				s.i++
			}
		}
	default:
		// Numbers, booleans, dates (which may hold a space): up to the
		// next delimiter.
		start := s.i
		for !s.eof() {
			c := s.src[s.i]
			if c == ',' || c == ']' || c == '}' || c == '#' || c == '\n' || c == '\r' {
				break
			}
			s.i++
		}
		return s.i > start
	}
}

// basicString reads "..." and returns it with its quotes.
func (s *posScanner) basicString() (string, bool) {
	start := s.i
	for j := s.i + 1; j < len(s.src); j++ {
		switch s.src[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return string(s.src[start:s.i]), true
		case '\n':
			return "", false
		}
	}
	return "", false
}

// literalString reads '...' and returns it with its quotes.
func (s *posScanner) literalString() (string, bool) {
	start := s.i
	for j := s.i + 1; j < len(s.src); j++ {
		switch s.src[j] {
		case '\'':
			s.i = j + 1
			return string(s.src[start:s.i]), true
		case '\n':
			return "", false
		}
	}
	return "", false
}

// multiline skips a """...""" or ”'...”' string; up to two more quotes may
// close it ("""a""""" is a"").
func (s *posScanner) multiline(q byte) bool {
	for j := s.i + 3; j+2 < len(s.src); j++ {
		if q == '"' && s.src[j] == '\\' {
			j++
			continue
		}
		if s.src[j] == q && s.src[j+1] == q && s.src[j+2] == q {
			j += 3
			for extra := 0; extra < 2 && j < len(s.src) && s.src[j] == q; extra++ {
				j++
			}
			s.i = j
			return true
		}
	}
	return false
}
