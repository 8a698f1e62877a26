package conflicts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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

// UdevdVersion is the systemd-udevd release whose reading of rules files
// this package implements (src/udev/udev-rules.c, udev-event.c and
// shared/udev-util.c of systemd v252, as Debian 12 ships it): the keys it
// knows, the operators each takes, its string escapes, its substitutions
// and its limits.
const UdevdVersion = 252

// Limits of udevd 252's reading (src/udev/udev-def.h): a rule's line,
// continuations joined, must be shorter than udevLineSize; a value
// written to an attribute or set as a property is formatted into a buffer
// of udevNameSize bytes, and udevd refuses a value that does not fit
// rather than writing it cut.
const (
	udevLineSize = 16384
	udevNameSize = 512
)

// Rejection is a rule udevd refuses when it reads the file, with the
// reason it logs: none of its keys take effect.
type Rejection struct {
	File   string
	Line   int
	Reason string
}

func (r Rejection) String() string {
	return fmt.Sprintf("%s:%d: %s (udevd %d ignores this rule)", r.File, r.Line, r.Reason, UdevdVersion)
}

// udevFile is one rules file, as udevd would read it.
type udevFile struct {
	path     string // as on the system, e.g. /usr/lib/udev/rules.d/60-io-scheduler.rules
	rules    []*udevRule
	rejected []Rejection
}

// tokenType orders a rule's keys as udevd 252 does: it sorts each line's
// tokens by type (udev-rules.c UdevRuleTokenType, sort_tokens), so every
// match is tested before any assignment, and properties are set before
// attributes are written, whatever order the line has them in.
type tokenType int8

const (
	tkAction tokenType = iota
	tkDevpath
	tkKernel
	tkDevlink
	tkName
	tkEnv
	tkConst
	tkTag
	tkSubsystem
	tkDriver
	tkAttr
	tkSysctl
	tkParentsKernel
	tkParentsSubsystem
	tkParentsDriver
	tkParentsAttr
	tkParentsTag
	tkTest
	tkProgram
	tkImportFile
	tkImportProgram
	tkImportBuiltin
	tkImportDB
	tkImportCmdline
	tkImportParent
	tkResult
	// Assignments; udevd has more of them (OWNER, MODE, TAG, RUN, ...),
	// which change nothing iosched follows and are not kept.
	tkOptionsEscapeReplace
	tkAssignTag
	tkAssignEnv
	tkAssignDevlink
	tkAssignAttr
)

func (t tokenType) isMatch() bool { return t <= tkResult }

// udevToken is one key of a rule: KEY{attr}OP"value".
type udevToken struct {
	typ    tokenType
	negate bool   // != (a match's operator)
	add    bool   // += (an ENV assignment appends)
	attr   string // what is in braces
	value  string // unquoted and unescaped
	text   string // as written, for messages
	line   int    // the physical line the key is on
	// queue is, for an ATTR{} assignment, the attribute as the policy
	// names it (scheduler, read_ahead_kb, iosched/fifo_batch); "" when
	// it is not a queue attribute.
	queue string
}

// udevRule is one rule: a line, with its continuations.
type udevRule struct {
	line    int // the line udevd names in its logs: the rule's last
	tokens  []udevToken
	gotoTo  string // GOTO="label"
	gotoIdx int    // the rule gotoTo leads to (resolveGotos), -1: none
	label   string // LABEL="label"
}

// writes reports whether the rule writes a queue attribute.
func (r *udevRule) writes() bool {
	for _, t := range r.tokens {
		if t.typ == tkAssignAttr && t.queue != "" {
			return true
		}
	}
	return false
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

// parseUdevRules splits a rules file into rules as udevd 252 does
// (udev-rules.c udev_rules_parse_file): leading blanks are skipped on
// every line, a line starting with '#' is a comment (also inside a
// continuation), a trailing backslash joins the next line, and a rule's
// line number is its last line's. A rule udevd refuses is returned among
// the file's rejected ones and skipped, as udevd skips it; problems are
// what else udevd logs of the file that bears on what it writes.
func parseUdevRules(path string, r io.Reader) (*udevFile, []string, error) {
	uf := &udevFile{path: path}
	var problems []string
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	rest := string(b)
	lineNr := 0
	// The rule being read, and where each of its physical lines starts
	// in it, so an assignment can be named by its own line.
	var cont strings.Builder
	var contStarts, contLines []int
	continuing, tooLong := false, false
	complete := true
	for rest != "" {
		raw, eof := nextLine(&rest)
		err := error(nil)
		if eof {
			err = io.EOF
		}
		if len(raw) >= udevLineSize {
			// read_line fails on it: udevd stops reading the file
			// there, keeping the rules before it, and resolves none of
			// its GOTOs.
			problems = append(problems, fmt.Sprintf("%s:%d: a line of %d bytes or more: udevd %d reads no further in this file and follows none of its GOTOs", path, lineNr+1, udevLineSize, UdevdVersion))
			complete = false
			break
		}
		lineNr++
		line := strings.TrimLeft(raw, " \t\n\r")
		if strings.HasPrefix(line, "#") {
			if err == io.EOF {
				break
			}
			continue
		}
		if continuing && !tooLong && cont.Len()+len(line) >= udevLineSize {
			tooLong = true
		}
		if !tooLong {
			contStarts = append(contStarts, cont.Len())
			contLines = append(contLines, lineNr)
			cont.WriteString(line)
		}
		if strings.HasSuffix(line, "\\") {
			continuing = true
			if !tooLong {
				s := cont.String()
				cont.Reset()
				cont.WriteString(s[:len(s)-1])
			}
			if err == io.EOF {
				break
			}
			continue
		}
		text := cont.String()
		starts, lines := contStarts, contLines
		cont.Reset()
		contStarts, contLines = nil, nil
		wasTooLong := tooLong
		continuing, tooLong = false, false
		switch {
		case wasTooLong:
			uf.rejected = append(uf.rejected, Rejection{File: path, Line: lineNr, Reason: "Line is too long, ignored"})
		case text != "":
			lineAt := func(off int) int {
				n := lines[0]
				for i, s := range starts {
					if s <= off {
						n = lines[i]
					}
				}
				return n
			}
			rule, reason := parseUdevRule(text, lineAt)
			if reason != "" {
				uf.rejected = append(uf.rejected, Rejection{File: path, Line: lineNr, Reason: reason})
				break
			}
			if rule == nil {
				break // nothing udevd keeps
			}
			rule.line = lineNr
			uf.rules = append(uf.rules, rule)
		}
		if err == io.EOF {
			break
		}
	}
	for _, r := range uf.rules {
		r.gotoIdx = -1
	}
	if complete {
		if p := uf.resolveGotos(); p != "" {
			problems = append(problems, p)
		}
	}
	return uf, problems, nil
}

// nextLine takes the next line from *rest as systemd's read_line does:
// "\n", "\r\n", "\r" and NUL each end a line. eof: nothing is left.
func nextLine(rest *string) (string, bool) {
	s := *rest
	i := strings.IndexAny(s, "\n\r\x00")
	if i < 0 {
		*rest = ""
		return s, true
	}
	n := 1
	if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
		n = 2
	}
	*rest = s[i+n:]
	return s[:i], *rest == ""
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

// Operators, as udevd 252 spells them (udev-rules.c parse_operator, which
// tries them in this order).
const (
	opMatch   = "=="
	opNoMatch = "!="
	opAdd     = "+="
	opRemove  = "-="
	opAssign  = "="
	opFinal   = ":="
)

// parseUdevRule parses one rule as udevd 252's rule_add_line does: keys
// separated by blanks and commas, each KEY{attr}OP"value". It returns the
// reason udevd logs when it refuses the rule (then no key of it takes
// effect), and nil without a reason for a rule with nothing udevd keeps.
// lineAt gives the physical line of an offset in text.
func parseUdevRule(text string, lineAt func(int) int) (*udevRule, string) {
	const invalidPair = "Invalid key/value pair, ignoring."
	r := &udevRule{gotoIdx: -1}
	effect := false
	i := 0
	for {
		for i < len(text) && strings.IndexByte(" \t\n\r,", text[i]) >= 0 {
			i++
		}
		if i >= len(text) {
			break
		}
		start := i
		for {
			if i >= len(text) {
				return nil, invalidPair
			}
			c := text[i]
			if strings.IndexByte(" \t\n\r={", c) >= 0 {
				break
			}
			if strings.IndexByte("+-!:", c) >= 0 && i+1 < len(text) && text[i+1] == '=' {
				break
			}
			i++
		}
		key := text[start:i]
		attr, hasAttr := "", false
		if text[i] == '{' {
			end := strings.IndexByte(text[i+1:], '}')
			if end < 0 {
				return nil, invalidPair
			}
			attr, hasAttr = text[i+1:i+1+end], true
			i += end + 2
		}
		for i < len(text) && strings.IndexByte(" \t\n\r", text[i]) >= 0 {
			i++
		}
		var op string
		for _, o := range []string{opMatch, opNoMatch, opAdd, opRemove, opAssign, opFinal} {
			if strings.HasPrefix(text[i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, invalidPair
		}
		i += len(op)
		for i < len(text) && strings.IndexByte(" \t\n\r", text[i]) >= 0 {
			i++
		}
		value, n, ok := parseUdevValue(text[i:])
		if !ok {
			return nil, invalidPair
		}
		i += n
		tok := udevToken{attr: attr, value: value, text: text[start:i], line: lineAt(start)}
		kept, reason := r.add(key, hasAttr, op, tok)
		if reason != "" {
			return nil, reason
		}
		effect = effect || kept
	}
	if !effect {
		return nil, "" // udevd: "The line takes no effect, ignoring."
	}
	// udevd sorts the tokens by type, keeping the written order among
	// tokens of one type.
	sort.SliceStable(r.tokens, func(a, b int) bool { return r.tokens[a].typ < r.tokens[b].typ })
	return r, ""
}

// parseUdevValue reads a quoted value as udevd 252 does
// (shared/udev-util.c udev_rule_parse_value): "..." where \" is a quote
// and every other backslash is kept, or e"..." with C-style escapes
// decoded. No other prefix exists in 252 (i"..." came in 256). It returns
// the value, how many bytes of s it took, and false where udevd fails.
func parseUdevValue(s string) (string, int, bool) {
	escaped := strings.HasPrefix(s, "e")
	off := 0
	if escaped {
		off = 1
	}
	if off >= len(s) || s[off] != '"' {
		return "", 0, false
	}
	body := s[off+1:]
	if !escaped {
		var b strings.Builder
		for i := 0; i < len(body); i++ {
			switch {
			case body[i] == '"':
				return b.String(), off + 1 + i + 1, true
			case body[i] == '\\' && i+1 < len(body) && body[i+1] == '"':
				b.WriteByte('"')
				i++
			default:
				b.WriteByte(body[i])
			}
		}
		return "", 0, false
	}
	end := -1
	for i := 0; i < len(body); i++ {
		if body[i] == '\\' {
			i++
			if i >= len(body) {
				return "", 0, false
			}
			continue
		}
		if body[i] == '"' {
			end = i
			break
		}
	}
	if end < 0 {
		return "", 0, false
	}
	v, ok := cunescape(body[:end])
	if !ok {
		return "", 0, false
	}
	return v, off + 1 + end + 1, true
}

// cunescape decodes C escapes as systemd's cunescape() with no flags
// (basic/escape.c cunescape_one): \a \b \f \n \r \t \v \\ \" \' \s (a
// blank), \xHH, \NNN (three octal digits), \uHHHH and \UHHHHHHHH. Any
// other escape, a NUL byte, or a backslash at the end fail.
func cunescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i >= len(s) {
			return "", false
		}
		switch c := s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '"', '\'':
			b.WriteByte(c)
		case 's':
			b.WriteByte(' ')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+n > len(s) {
				return "", false
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || v == 0 {
				return "", false
			}
			if c == 'x' {
				b.WriteByte(byte(v))
			} else {
				if v > unicode.MaxRune || !utf8.ValidRune(rune(v)) {
					return "", false
				}
				b.WriteRune(rune(v))
			}
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			if i+3 > len(s) {
				return "", false
			}
			v, err := strconv.ParseUint(s[i:i+3], 8, 32)
			if err != nil || v == 0 || v > 255 {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// udevBuiltins are udevd 252's built-in commands (udev-builtin.c), as
// Debian builds it (blkid, kmod and ACL support in).
var udevBuiltins = []string{"blkid", "btrfs", "hwdb", "input_id", "keyboard", "kmod", "net_id", "net_setup_link", "path_id", "usb_id", "uaccess"}

// isBuiltin is udev_builtin_lookup: the command's first word names a
// built-in when it is the start of one's name.
func isBuiltin(cmd string) bool { return builtinOf(cmd) != "" }

// builtinOf is the built-in cmd names (udev_builtin_lookup), "" when none.
func builtinOf(cmd string) string {
	w := strings.TrimLeft(cmd, " \t\n\r")
	if i := strings.IndexAny(w, " \t\n\r"); i >= 0 {
		w = w[:i]
	}
	for _, b := range udevBuiltins {
		if strings.HasPrefix(b, w) {
			return b
		}
	}
	return ""
}

// builtinSets are the properties each built-in may set, as globs
// (src/udev/udev-builtin-*.c); nil: any (hwdb's entries name their own).
var builtinSets = map[string][]string{
	"blkid":          {"ID_FS_*", "ID_PART_*"},
	"btrfs":          {"ID_BTRFS_READY"},
	"input_id":       {"ID_INPUT*"},
	"keyboard":       {},
	"kmod":           {},
	"net_id":         {"ID_NET_*"},
	"net_setup_link": {"ID_NET_*"},
	"path_id":        {"ID_PATH*"},
	"uaccess":        {},
	"usb_id":         {"ID_*"},
}

// udevEnvReadOnly are the properties an ENV{} assignment may not set.
var udevEnvReadOnly = []string{"ACTION", "DEVLINKS", "DEVNAME", "DEVPATH", "DEVTYPE", "DRIVER", "IFINDEX", "MAJOR", "MINOR", "SEQNUM", "SUBSYSTEM", "TAGS"}

// add checks one key as udevd 252's parse_token does and keeps what
// iosched follows of it. kept says whether udevd keeps a token (a line
// with none "takes no effect"); reason is udevd's message when it refuses
// the whole rule for this key.
func (r *udevRule) add(key string, hasAttr bool, op string, t udevToken) (kept bool, reason string) {
	isMatch := op == opMatch || op == opNoMatch
	t.negate = op == opNoMatch
	invalidAttr := "Invalid attribute for " + key + "."
	invalidOp := "Invalid operator for " + key + "."
	keep := func(typ tokenType) (bool, string) {
		t.typ = typ
		r.tokens = append(r.tokens, t)
		return true, ""
	}
	matchOnly := func(typ tokenType) (bool, string) {
		switch {
		case hasAttr:
			return false, invalidAttr
		case !isMatch:
			return false, invalidOp
		}
		return keep(typ)
	}
	switch key {
	case "ACTION":
		return matchOnly(tkAction)
	case "DEVPATH":
		return matchOnly(tkDevpath)
	case "KERNEL":
		return matchOnly(tkKernel)
	case "SUBSYSTEM":
		return matchOnly(tkSubsystem)
	case "DRIVER":
		return matchOnly(tkDriver)
	case "KERNELS":
		return matchOnly(tkParentsKernel)
	case "SUBSYSTEMS":
		return matchOnly(tkParentsSubsystem)
	case "DRIVERS":
		return matchOnly(tkParentsDriver)
	case "TAGS":
		return matchOnly(tkParentsTag)
	case "RESULT":
		return matchOnly(tkResult)
	case "SYMLINK":
		switch {
		case hasAttr:
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		case isMatch:
			return keep(tkDevlink)
		}
		return keep(tkAssignDevlink)
	case "NAME":
		switch {
		case hasAttr:
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		case isMatch:
			return keep(tkName)
		case t.value == "%k":
			return false, `Ignoring NAME="%k", as it will take no effect.`
		case t.value == "":
			return false, `Ignoring NAME="", as udev will not delete any network interfaces.`
		}
		return true, ""
	case "ENV":
		switch {
		case t.attr == "":
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		case isMatch:
			return keep(tkEnv)
		case slices.Contains(udevEnvReadOnly, t.attr):
			return false, fmt.Sprintf("Invalid ENV attribute. '%s' cannot be set.", t.attr)
		}
		t.add = op == opAdd
		return keep(tkAssignEnv)
	case "CONST":
		switch {
		case t.attr != "arch" && t.attr != "virt":
			return false, invalidAttr
		case !isMatch:
			return false, invalidOp
		}
		return keep(tkConst)
	case "TAG":
		switch {
		case hasAttr:
			return false, invalidAttr
		case isMatch:
			return keep(tkTag)
		}
		return keep(tkAssignTag)
	case "ATTR", "SYSCTL":
		switch {
		case t.attr == "":
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		case isMatch && key == "ATTR":
			return keep(tkAttr)
		case isMatch:
			return keep(tkSysctl)
		case key == "ATTR":
			// += and := are taken as = (udevd warns "ATTR key takes
			// '==', '!=', or '=' operator, assuming '='").
			t.queue, _ = queueAttr(t.attr)
			return keep(tkAssignAttr)
		}
		return true, ""
	case "ATTRS":
		switch {
		case t.attr == "":
			return false, invalidAttr
		case !isMatch:
			return false, invalidOp
		}
		return keep(tkParentsAttr)
	case "TEST":
		if t.attr != "" {
			if why := parseMode(t.attr); why != "" {
				return false, fmt.Sprintf("Failed to parse mode '%s': %s", t.attr, why)
			}
		}
		if !isMatch {
			return false, invalidOp
		}
		return keep(tkTest)
	case "PROGRAM":
		switch {
		case hasAttr:
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		}
		t.negate = op == opNoMatch // any assignment runs it as ==
		return keep(tkProgram)
	case "IMPORT":
		switch {
		case t.attr == "":
			return false, invalidAttr
		case op == opRemove:
			return false, invalidOp
		}
		t.negate = op == opNoMatch
		switch t.attr {
		case "file":
			return keep(tkImportFile)
		case "program":
			return keep(tkImportProgram)
		case "builtin":
			if !isBuiltin(t.value) {
				return false, "Unknown builtin command: " + t.value
			}
			return keep(tkImportBuiltin)
		case "db":
			return keep(tkImportDB)
		case "cmdline":
			return keep(tkImportCmdline)
		case "parent":
			return keep(tkImportParent)
		}
		return false, invalidAttr
	case "OPTIONS":
		switch {
		case hasAttr:
			return false, invalidAttr
		case isMatch || op == opRemove:
			return false, invalidOp
		}
		switch v := t.value; {
		case v == "string_escape=replace":
			return keep(tkOptionsEscapeReplace)
		case v == "string_escape=none" || v == "db_persist" || v == "watch" || v == "nowatch" || strings.HasPrefix(v, "static_node="):
			return true, ""
		case strings.HasPrefix(v, "link_priority="):
			p := strings.TrimPrefix(v, "link_priority=")
			if why := parseInt(p); why != "" {
				return false, fmt.Sprintf("Failed to parse link priority '%s': %s", p, why)
			}
			return true, ""
		case strings.HasPrefix(v, "log_level="):
			l := strings.TrimPrefix(v, "log_level=")
			if l != "reset" && !isLogLevel(l) {
				return false, fmt.Sprintf("Failed to parse log level '%s': Invalid argument", l)
			}
			return true, ""
		}
		return false, "" // udevd warns and ignores the key, not the rule
	case "OWNER", "GROUP", "MODE":
		switch {
		case hasAttr:
			return false, invalidAttr
		case isMatch || op == opRemove:
			return false, invalidOp
		}
		return true, ""
	case "SECLABEL":
		switch {
		case t.attr == "":
			return false, invalidAttr
		case isMatch || op == opRemove:
			return false, invalidOp
		}
		return true, ""
	case "RUN":
		switch {
		case isMatch || op == opRemove:
			return false, invalidOp
		case !hasAttr || t.attr == "program":
			return true, ""
		case t.attr == "builtin":
			if !isBuiltin(t.value) {
				return false, fmt.Sprintf("Unknown builtin command '%s', ignoring", t.value)
			}
			return true, ""
		}
		return false, invalidAttr
	case "GOTO":
		switch {
		case hasAttr:
			return false, invalidAttr
		case op != opAssign:
			return false, invalidOp
		case r.gotoTo != "":
			return false, "" // udevd ignores a second GOTO of a rule
		}
		r.gotoTo = t.value
		return true, ""
	case "LABEL":
		switch {
		case hasAttr:
			return false, invalidAttr
		case op != opAssign:
			return false, invalidOp
		}
		r.label = t.value
		return true, ""
	}
	return false, fmt.Sprintf("Invalid key '%s'", key)
}

// parseMode is systemd's parse_mode: an octal number up to 07777; the
// error's text as udevd logs it, "" when s is one.
func parseMode(s string) string {
	v, err := strconv.ParseUint(s, 8, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return "Numerical result out of range"
	case err != nil:
		return "Invalid argument"
	case v > 0o7777:
		return "Numerical result out of range"
	}
	return ""
}

// parseInt is systemd's safe_atoi: the error's text, "" when s is an int.
func parseInt(s string) string {
	_, err := strconv.ParseInt(s, 0, 32)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return "Numerical result out of range"
	case err != nil:
		return "Invalid argument"
	}
	return ""
}

// isLogLevel is whether systemd's log_level_from_string takes s: a
// syslog level's name or number.
func isLogLevel(s string) bool {
	if slices.Contains([]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}, s) {
		return true
	}
	n, err := strconv.ParseUint(s, 10, 8)
	return err == nil && n <= 7
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

// udevdBinaries are where systemd-udevd's code is installed (udevd is
// udevadm under another name in systemd 252; older trees have it apart).
var udevdBinaries = []string{"/usr/bin/udevadm", "/bin/udevadm", "/usr/lib/systemd/systemd-udevd", "/lib/systemd/systemd-udevd"}

// maxUdevdBinary caps what is read of a udevd binary to find its version
// (Debian's is 1.3 MiB).
const maxUdevdBinary = 64 << 20

// findUdevd reads the systemd-udevd installed under root: its version
// ("252.39-1~deb12u2", "" when none is found) and the architecture it is
// built for, as CONST{arch} names it ("" when not told). They are read
// from the binary, not asked of it: the tree may be another machine's.
// udevd's start-up message carries the version as a constant ("Starting
// systemd-udevd version " GIT_VERSION, src/udev/udevd.c).
func findUdevd(root string) (version, arch string) {
	const marker = "Starting systemd-udevd version "
	for _, p := range udevdBinaries {
		b, err := fileio.Read(filepath.Join(root, p), maxUdevdBinary)
		if err != nil {
			continue
		}
		i := bytes.Index(b, []byte(marker))
		if i < 0 {
			continue
		}
		v := b[i+len(marker):]
		n := 0
		for n < len(v) && n < 64 && (v[n] >= '0' && v[n] <= '9' || v[n] >= 'a' && v[n] <= 'z' || v[n] >= 'A' && v[n] <= 'Z' || bytes.IndexByte([]byte(".~+-_"), v[n]) >= 0) {
			n++
		}
		if n > 0 {
			return string(v[:n]), elfArch(b)
		}
	}
	return "", ""
}

// elfArch is the architecture an ELF file is built for, named as
// systemd's architecture_to_string names it (src/basic/architecture.c),
// "" when b is not ELF or its machine is not one named here.
func elfArch(b []byte) string {
	if len(b) < 20 || string(b[:4]) != "\x7fELF" {
		return ""
	}
	is64, little := b[4] == 2, b[5] == 1
	machine := int(b[18]) | int(b[19])<<8
	if !little {
		machine = int(b[18])<<8 | int(b[19])
	}
	pick := func(a64le, a64be, a32le, a32be string) string {
		switch {
		case is64 && little:
			return a64le
		case is64:
			return a64be
		case little:
			return a32le
		}
		return a32be
	}
	switch machine {
	case 62: // EM_X86_64
		return "x86-64"
	case 3: // EM_386
		return "x86"
	case 183: // EM_AARCH64
		return pick("arm64", "arm64-be", "", "")
	case 40: // EM_ARM
		return pick("", "", "arm", "arm-be")
	case 21: // EM_PPC64
		return pick("ppc64-le", "ppc64", "", "")
	case 20: // EM_PPC
		return pick("", "", "ppc-le", "ppc")
	case 22: // EM_S390
		return pick("", "s390x", "", "s390")
	case 243: // EM_RISCV
		return pick("riscv64", "", "riscv32", "")
	case 258: // EM_LOONGARCH
		return pick("loongarch64", "", "", "")
	}
	return ""
}

// udevdMajor is a udevd version's release number (252 of
// "252.39-1~deb12u2"), 0 when it has none.
func udevdMajor(v string) int {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(v[:i])
	return n
}
