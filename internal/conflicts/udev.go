package conflicts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/iosched/iosched/internal/fileio"
)

// UdevRuleDirs are where systemd-udevd reads rules, highest precedence
// first (systemd src/udev/udev-rules.c RULES_DIRS): a file in an earlier
// directory hides every file of the same name in the later ones.
func UdevRuleDirs() []string {
	return []string{
		"/etc/udev/rules.d",
		"/run/udev/rules.d",
		"/usr/local/lib/udev/rules.d",
		"/usr/lib/udev/rules.d",
		"/lib/udev/rules.d",
	}
}

// udevFile is one rules file, as udevd would read it.
type udevFile struct {
	path  string // as on the system, e.g. /usr/lib/udev/rules.d/60-io-scheduler.rules
	rules []*udevRule
}

// udevRule is one rule: a line, with its continuations.
type udevRule struct {
	line    int // the line udevd names in its logs: the rule's last
	matches []udevMatch
	writes  []udevWrite
	gotoTo  string // GOTO="label"
	gotoIdx int    // the rule gotoTo leads to (resolveGotos), -1: none
	label   string // LABEL="label"
}

// udevMatch is one condition of a rule: KEY{attr}=="value" or !=, or a key
// that tests something iosched cannot know (PROGRAM, TEST, IMPORT, ...),
// kept as unknown.
type udevMatch struct {
	key, attr string
	negate    bool
	value     string
	nocase    bool   // i"..." (systemd 256+)
	text      string // as written, for messages
}

// udevWrite is one ATTR{queue/...}= (or :=) assignment.
type udevWrite struct {
	attr  string // as the policy names it: scheduler, read_ahead_kb, iosched/fifo_batch
	value string
	line  int // the physical line the assignment is on
}

// listUdevRules returns the rules files udevd would read under root, in
// the order it reads them (by file name, across directories), each name
// taken from the first directory that has it. A file that is a link to
// /dev/null, or empty, masks the name and is not read (systemd
// conf_files_list). Directories that do not exist are skipped.
func listUdevRules(root string) (paths []string, problems []string) {
	byName := map[string]string{}
	masked := map[string]bool{}
	for _, dir := range UdevRuleDirs() {
		full := filepath.Join(root, dir)
		entries, err := os.ReadDir(full)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				problems = append(problems, fmt.Sprintf("reading udev rules directory %s: %v", dir, err))
			}
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".rules") || strings.HasPrefix(name, ".") {
				continue
			}
			if _, seen := byName[name]; seen || masked[name] {
				continue
			}
			p := filepath.Join(full, name)
			if isMask(p) {
				masked[name] = true
				continue
			}
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				continue // a dangling link, a directory: udevd skips it too
			}
			byName[name] = filepath.Join(dir, name)
		}
	}
	for name := range byName {
		paths = append(paths, byName[name])
	}
	sort.Slice(paths, func(i, j int) bool { return filepath.Base(paths[i]) < filepath.Base(paths[j]) })
	return paths, problems
}

// isMask reports whether p masks its name: a symbolic link to /dev/null, or
// an empty file.
func isMask(p string) bool {
	if target, err := os.Readlink(p); err == nil && filepath.Clean(target) == "/dev/null" {
		return true
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Size() == 0
}

// Size caps of the rules read: the largest rules files distributions ship
// (device lists such as libmtp's) are a few hundred KiB, and a machine's
// rules a few MiB together. They bound what a file put there by mistake,
// or a link to /dev/zero, costs to read and parse.
const (
	maxRulesFile  = 4 << 20
	maxRulesTotal = 32 << 20
)

// readUdevFile reads and parses one rules file (path as on the system),
// taking its size from budget (what all the rules may still read).
func readUdevFile(root, path string, budget *int64) (*udevFile, []string, error) {
	full := filepath.Join(root, path)
	limit := min(int64(maxRulesFile), *budget)
	b, err := fileio.Read(full, limit)
	switch {
	case errors.Is(err, fileio.ErrTooLarge) && limit < maxRulesFile:
		*budget = -1 // Load reads no more
		return nil, nil, fmt.Errorf("reading udev rules %s: the rules files are larger than %d bytes together, this one and the rest are not read", full, maxRulesTotal)
	case err != nil:
		return nil, nil, fmt.Errorf("reading udev rules: %w", err)
	}
	*budget -= int64(len(b))
	uf, problems, err := parseUdevRules(path, bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("reading udev rules %s: %w", path, err)
	}
	return uf, problems, nil
}

// parseUdevRules splits a rules file into rules as udevd does
// (udev-rules.c rules_parse_file): leading blanks are skipped on every
// line, a line starting with '#' is a comment (also inside a
// continuation), a trailing backslash joins the next line, and a rule's
// line number is its last line's. Lines udevd would reject are reported
// in problems and skipped, as udevd skips them.
func parseUdevRules(path string, r interface{ Read([]byte) (int, error) }) (*udevFile, []string, error) {
	uf := &udevFile{path: path}
	var problems []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	lineNr := 0
	// The rule being read, and where each of its physical lines starts
	// in it, so an assignment can be named by its own line.
	var cont strings.Builder
	var contStarts, contLines []int
	for sc.Scan() {
		lineNr++
		line := strings.TrimLeft(sc.Text(), " \t")
		if strings.HasPrefix(line, "#") {
			continue
		}
		contStarts = append(contStarts, cont.Len())
		contLines = append(contLines, lineNr)
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\"))
			continue
		}
		cont.WriteString(line)
		text := cont.String()
		starts, lines := contStarts, contLines
		lineAt := func(off int) int {
			n := lines[0]
			for i, s := range starts {
				if s <= off {
					n = lines[i]
				}
			}
			return n
		}
		cont.Reset()
		contStarts, contLines = nil, nil
		if strings.TrimSpace(text) == "" {
			continue
		}
		rule, err := parseUdevRule(text, lineAt)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: %v (udevd skips this rule too)", path, lineNr, err))
			continue
		}
		rule.line = lineNr
		uf.rules = append(uf.rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if p := uf.resolveGotos(); p != "" {
		problems = append(problems, p)
	}
	return uf, problems, nil
}

// resolveGotos points each GOTO at the first later rule with its LABEL,
// as udevd does once when it reads the file (udev-rules.c
// rule_resolve_goto), so that evaluating a disk never searches for a
// label. A GOTO with no such label is dropped, as udevd drops it; the
// problem returned counts them, naming the first.
func (uf *udevFile) resolveGotos() string {
	labels := map[string][]int{} // label -> rule indexes, ascending
	for i, r := range uf.rules {
		if r.label != "" {
			labels[r.label] = append(labels[r.label], i)
		}
	}
	missing, first := 0, 0
	for i, r := range uf.rules {
		r.gotoIdx = -1
		if r.gotoTo == "" {
			continue
		}
		at := labels[r.gotoTo]
		if k := sort.SearchInts(at, i+1); k < len(at) {
			r.gotoIdx = at[k]
			continue
		}
		if missing == 0 {
			first = r.line
		}
		missing++
	}
	switch missing {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("%s:%d: GOTO has no matching LABEL after it (udevd ignores it too)", uf.path, first)
	}
	return fmt.Sprintf("%s:%d: %d GOTOs have no matching LABEL after them, this one the first (udevd ignores them too)", uf.path, first, missing)
}

// parseUdevRule parses one rule: KEY{attr}OP"value" pairs separated by
// commas and blanks. lineAt gives the physical line of an offset in text.
func parseUdevRule(text string, lineAt func(int) int) (*udevRule, error) {
	r := &udevRule{}
	i := 0
	for {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == ',') {
			i++
		}
		if i >= len(text) {
			return r, nil
		}
		start := i
		for i < len(text) && (isUpper(text[i]) || text[i] == '_') {
			i++
		}
		key := text[start:i]
		if key == "" {
			return nil, fmt.Errorf("expected a key at %q", clip(text[start:]))
		}
		var attr string
		if i < len(text) && text[i] == '{' {
			end := strings.IndexByte(text[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%s: unterminated {", key)
			}
			attr = text[i+1 : i+end]
			i += end + 1
		}
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		var op string
		for _, o := range []string{"==", "!=", "+=", "-=", ":=", "="} {
			if strings.HasPrefix(text[i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, fmt.Errorf("%s: expected an operator at %q", key, clip(text[i:]))
		}
		i += len(op)
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		escapes, nocase := false, false
		if i+1 < len(text) && text[i+1] == '"' && (text[i] == 'e' || text[i] == 'i') {
			escapes, nocase = text[i] == 'e', text[i] == 'i'
			i++
		}
		if i >= len(text) || text[i] != '"' {
			return nil, fmt.Errorf("%s: the value must be in double quotes", key)
		}
		value, n, err := unquote(text[i+1:], escapes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		written := text[start : i+1+n]
		i += 1 + n
		r.add(key, attr, op, value, nocase, written, lineAt(start))
	}
}

// add records one key of the rule.
func (r *udevRule) add(key, attr, op, value string, nocase bool, text string, line int) {
	switch key {
	case "GOTO":
		r.gotoTo = value
		return
	case "LABEL":
		r.label = value
		return
	case "ATTR":
		if op == "=" || op == ":=" {
			if name, ok := queueAttr(attr); ok {
				r.writes = append(r.writes, udevWrite{attr: name, value: strings.TrimSpace(value), line: line})
			}
			return
		}
	}
	switch op {
	case "==", "!=":
		r.matches = append(r.matches, udevMatch{key: key, attr: attr, negate: op == "!=", value: value, nocase: nocase, text: text})
	default:
		// PROGRAM= and IMPORT{...}= run something and fail the rule when
		// it fails: a condition iosched cannot decide. Other assignments
		// (ENV{x}=, SYMLINK+=, RUN+=, ...) do not decide whether the
		// rule applies.
		if key == "PROGRAM" || key == "IMPORT" {
			r.matches = append(r.matches, udevMatch{key: key, attr: attr, text: text})
		}
	}
}

// queueAttr maps an ATTR{} name a rule writes to the policy's name for the
// same setting; bdi/read_ahead_kb is the same value as queue/read_ahead_kb
// (both are the disk's backing device's ra_pages, block/blk-sysfs.c and
// mm/backing-dev.c).
func queueAttr(attr string) (string, bool) {
	attr = strings.Trim(attr, "/")
	switch {
	case attr == "bdi/read_ahead_kb":
		return "read_ahead_kb", true
	case strings.HasPrefix(attr, "queue/") && len(attr) > len("queue/"):
		return strings.TrimPrefix(attr, "queue/"), true
	}
	return "", false
}

// unquote reads a value up to its closing quote: a backslash-quote does not
// close it, and with escapes (e"...") \n, \t, \\ and \" are decoded as
// systemd does. It returns the value and how many bytes it took, the quote
// included.
func unquote(s string, escapes bool) (string, int, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '\\' && escapes && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("the value has no closing quote")
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
