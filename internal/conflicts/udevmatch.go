package conflicts

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/iosched/iosched/internal/sysfs"
)

// verdict is what iosched can tell of a condition on a disk.
type verdict int8

const (
	fails verdict = iota
	unknown
	holds
)

// maxUdevPaths bounds the paths followed through one rules file for one
// event: each condition iosched cannot decide in front of a GOTO or a
// property assignment doubles them. Past the bound the rest of a path is
// followed without taking such a GOTO, and every write on it is possible.
// maxUdevSteps bounds the rules evaluated that way (paths times rules), so
// that a long file gets fewer paths.
const (
	maxUdevPaths = 256
	maxUdevSteps = 1 << 20
)

// udevEvent is a block uevent for a whole disk as udevd would process it.
type udevEvent struct {
	action string
	dev    *sysfs.Device
	known  Known
	arch   string // CONST{arch}, "" when not known
}

// envVal is a property's value on a path, when known; "" is unset.
type envVal struct {
	v     string
	known bool
}

// udevState is what one path through the rules has done so far.
type udevState struct {
	env     map[string]envVal  // properties set or removed on this path
	anyEnv  bool               // an import may have set any property
	taint   []string           // globs of properties an import may have set
	links   bool               // a SYMLINK assignment may have run: the links are not known
	tags    bool               // a TAG assignment may have run: the tags are not known
	written map[string]readVal // attributes written on this path (as rules name them), with what a read then gives
	program bool               // a PROGRAM ran: RESULT and %c are its output
	parents bool               // a parent key was tested: %b, %d and $attr{} may name that parent
	lost    bool               // a GOTO was not followed (maxUdevPaths): writes are possible
	// assumed are the conditions this path takes as holding (or not)
	// that iosched cannot decide.
	assumed []string
	recs    []udevWriteRec
}

func (st *udevState) clone() *udevState {
	c := *st
	c.env = make(map[string]envVal, len(st.env))
	for k, v := range st.env {
		c.env[k] = v
	}
	c.written = make(map[string]readVal, len(st.written))
	for k, v := range st.written {
		c.written[k] = v
	}
	c.assumed = slices.Clone(st.assumed)
	c.taint = slices.Clone(st.taint)
	c.recs = slices.Clone(st.recs)
	return &c
}

// readVal is what reading an attribute a rule wrote may give: one of
// alts, when known.
type readVal struct {
	alts  []string
	known bool
}

func (a readVal) equal(b readVal) bool { return a.known == b.known && slices.Equal(a.alts, b.alts) }

// udevWriteRec is a queue attribute write a path makes.
type udevWriteRec struct {
	file, rule, tok int
	value           string
	unknownValue    []string // substitutions whose value is not known here
	sure            bool     // the rule's own conditions held on this path
	open            []string // the rule's conditions not decided
}

// unknownEnv are properties udevd itself or the kernel's event carry
// whose values a snapshot does not hold.
var unknownEnv = []string{"SEQNUM", "DISKSEQ", "DEVLINKS", "TAGS", "CURRENT_TAGS", "USEC_INITIALIZED", "SYNTH_UUID"}

// env is property key on the path: its value and whether it is known.
func (ev udevEvent) env(st *udevState, key string) (string, bool) {
	if v, ok := st.env[key]; ok {
		return v.v, v.known
	}
	if key == "ACTION" {
		return ev.action, true
	}
	if v, isKernel, known := kernelEnv(ev.dev, key); isKernel {
		return v, known
	}
	if st.anyEnv || slices.Contains(unknownEnv, key) || strings.HasPrefix(key, "SYNTH_ARG_") ||
		slices.ContainsFunc(st.taint, func(g string) bool { return fnmatch(g, key) }) {
		return "", false
	}
	return "", true // no rule before sets it: unset
}

// kernelEnv is a property the kernel's uevent of a whole disk carries, or
// one the caller knows (Properties); isKernel is false for any other.
func kernelEnv(d *sysfs.Device, key string) (value string, isKernel, known bool) {
	switch key {
	case "DEVTYPE":
		return "disk", true, true
	case "SUBSYSTEM":
		return "block", true, true
	case "DEVPATH":
		return "/" + d.Path, true, d.Path != ""
	case "MAJOR", "MINOR":
		maj, min, ok := strings.Cut(d.MajorMinor, ":")
		if !ok {
			return "", true, false
		}
		if key == "MAJOR" {
			return maj, true, true
		}
		return min, true, true
	case "DEVNAME":
		if d.DevName != "" {
			return "/dev/" + d.DevName, true, true
		}
		if strings.Contains(d.Name, "!") {
			return "", true, false // the node is in a subdirectory uevent names
		}
		return "/dev/" + d.Name, true, true
	}
	if v, ok := d.Properties[key]; ok {
		return v, true, true
	}
	return "", false, false
}

// envValue is kernelEnv's value, known or not.
func envValue(d *sysfs.Device, key string) (string, bool) {
	v, _, known := kernelEnv(d, key)
	return v, known
}

// evalMatches tests r's conditions on the path, in udevd's order, until
// one fails, doing what testing them does (a PROGRAM or IMPORT run). It
// returns what is known of them all and the conditions not decided.
func (ev udevEvent) evalMatches(r *udevRule, st *udevState) (verdict, []string) {
	v := holds
	var open []string
	for _, t := range r.tokens {
		if !t.typ.isMatch() {
			break
		}
		switch ev.evalToken(t, st) {
		case fails:
			return fails, nil
		case unknown:
			v = unknown
			open = append(open, t.text)
		}
	}
	return v, open
}

// evalToken decides one condition. Keys naming the event or the disk
// itself are decided from the snapshot and Known; those needing programs,
// files, the kernel command line or parents iosched does not read are
// unknown.
func (ev udevEvent) evalToken(t udevToken, st *udevState) verdict {
	d := ev.dev
	decide := func(s string, known bool) verdict {
		if !known {
			return unknown
		}
		if matchUdevValue(t, s) {
			return holds
		}
		return fails
	}
	switch t.typ {
	case tkAction:
		return decide(ev.action, true)
	case tkDevpath:
		return decide("/"+d.Path, d.Path != "")
	case tkKernel:
		return decide(d.Name, true)
	case tkName:
		// NAME= names network interfaces only: a disk's event has none.
		return decide("", true)
	case tkEnv:
		return decide(ev.env(st, t.attr))
	case tkSubsystem:
		return decide("block", true)
	case tkDriver:
		return decide("", true) // a block device has no driver; its parent has
	case tkAttr:
		name, unknownName := ev.format(st, t.attr)
		if strings.HasPrefix(t.attr, "[") || len(unknownName) > 0 {
			return unknown
		}
		alts, present, known := ev.attrAlts(st, name)
		switch {
		case !known:
			return unknown
		case !present:
			// udevd: an attribute that cannot be read matches neither
			// == nor != (token_match_attr returns false).
			return fails
		}
		v := decide(trimAttr(t, alts[0]), true)
		for _, a := range alts[1:] {
			if decide(trimAttr(t, a), true) != v {
				return unknown
			}
		}
		return v
	case tkParentsKernel, tkParentsSubsystem, tkParentsDriver, tkParentsAttr:
		st.parents = true
		return ev.evalParents(t, st)
	case tkTest:
		return ev.evalTest(t, st)
	case tkProgram:
		st.program = true
		return unknown
	case tkImportDB, tkImportCmdline:
		st.env[t.value] = envVal{}
		return unknown
	case tkImportBuiltin, tkImportProgram:
		if sets, ok := builtinSets[builtinOf(t.value)]; ok && (t.typ == tkImportBuiltin || isBuiltin(t.value)) {
			st.taintEnv(sets)
			return unknown
		}
		st.taintEnv(nil)
		return unknown
	case tkImportParent:
		st.taintEnv([]string{t.value})
		return unknown
	case tkImportFile:
		st.taintEnv(nil)
		return unknown
	case tkDevlink:
		if st.links {
			return unknown
		}
		// No link yet: a match of each link matches nothing, so the key
		// holds only as != (udevd's "?*" is != "", turned around).
		return verdictOf(t.negate != (t.value == "?*"))
	case tkTag, tkParentsTag:
		if st.tags {
			return unknown
		}
		return verdictOf(t.negate != (t.value == "?*"))
	case tkResult:
		if !st.program {
			return decide("", true) // no PROGRAM ran: the result is empty
		}
		return unknown
	case tkConst:
		// CONST{virt} is what the machine runs on, not known here.
		return decide(ev.arch, t.attr == "arch" && ev.arch != "")
	}
	return unknown // SYSCTL
}

// switched reports whether rel is a file a scheduler switch on the path
// may have replaced or reset: the scheduler's own files under
// queue/iosched, and nr_requests (elevator_switch in block/elevator.c).
func (st *udevState) switched(rel string) bool {
	if _, ok := st.written["queue/scheduler"]; !ok {
		return false
	}
	rel = strings.Trim(rel, "/")
	return rel == "queue/iosched" || strings.HasPrefix(rel, "queue/iosched/") || rel == "queue/nr_requests"
}

// taintEnv marks the properties matching globs (nil: every one) as set to
// values not known here.
func (st *udevState) taintEnv(globs []string) {
	if globs == nil {
		st.anyEnv = true
	}
	st.taint = append(st.taint, globs...)
	for k := range st.env {
		if globs == nil || slices.ContainsFunc(globs, func(g string) bool { return fnmatch(g, k) }) {
			st.env[k] = envVal{}
		}
	}
}

func verdictOf(b bool) verdict {
	if b {
		return holds
	}
	return fails
}

// attr reads an attribute of the disk for a rule on the path. After a
// rule wrote it, a read gives what the write left, known only where
// readBack can tell.
func (ev udevEvent) attr(st *udevState, name string) (value string, present, known bool) {
	alts, present, known := ev.attrAlts(st, name)
	if !known || len(alts) > 1 {
		return "", false, false
	}
	if !present {
		return "", false, true
	}
	return alts[0], true, true
}

// attrAlts is attr with the values a read may give.
func (ev udevEvent) attrAlts(st *udevState, name string) (alts []string, present, known bool) {
	if w, ok := st.written[strings.Trim(name, "/")]; ok {
		return w.alts, true, w.known
	}
	if st.switched(name) {
		return nil, false, false
	}
	v, present, known := ev.known.attrValue(ev.dev, name)
	return []string{v}, present, known
}

// trimAttr drops the trailing blanks of an attribute's value unless the
// pattern ends in one (udev-rules.c attr_match_remove_trailing_whitespace).
func trimAttr(t udevToken, v string) string {
	if t.value != "" && !strings.ContainsRune(" \t\n\r\v\f", rune(t.value[len(t.value)-1])) {
		return strings.TrimRight(v, " \t\n\r\v\f")
	}
	return v
}

// evalTest decides TEST=="path" for a path inside the disk's own sysfs
// directory, from Known.Exists; anything else is unknown.
func (ev udevEvent) evalTest(t udevToken, st *udevState) verdict {
	p, open := ev.format(st, t.value)
	if len(open) > 0 || t.attr != "" || strings.Contains(p, "/*/") || ev.dev.Path == "" {
		return unknown
	}
	var rel string
	switch {
	case strings.HasPrefix(p, "["):
		return unknown
	case strings.HasPrefix(p, "/"):
		// The disk's directory, by its path or its class links.
		found := false
		for _, dir := range []string{"/sys/" + ev.dev.Path + "/", "/sys/block/" + ev.dev.Name + "/", "/sys/class/block/" + ev.dev.Name + "/"} {
			if r, ok := strings.CutPrefix(p, dir); ok {
				rel, found = r, true
				break
			}
		}
		if !found {
			return unknown
		}
	default:
		rel = p
	}
	rel = strings.Trim(rel, "/")
	if rel == "" || slices.Contains(strings.Split(rel, "/"), "..") {
		return unknown
	}
	exists, known := ev.exists(st, rel)
	if !known {
		return unknown
	}
	if exists != t.negate {
		return holds
	}
	return fails
}

// exists tells whether rel exists below the disk's directory: from the
// snapshot where it shows (queue/scheduler, the mq/N directories of the
// hardware queues, attributes it holds), else from Known.Exists.
func (ev udevEvent) exists(st *udevState, rel string) (exists, known bool) {
	d := ev.dev
	if _, ok := st.written[rel]; ok {
		return true, true // udevd wrote it: it is there
	}
	if st.switched(rel) && rel != "queue/nr_requests" {
		return false, false // a switch resets nr_requests, it does not remove it
	}
	if q, ok := strings.CutPrefix(rel, "mq/"); ok && d.HWQueues != nil && !strings.Contains(q, "/") {
		if n, err := strconv.Atoi(q); err == nil && strconv.Itoa(n) == q {
			return n < *d.HWQueues, true
		}
	}
	if rel == "mq" && d.HWQueues != nil {
		return *d.HWQueues > 0, true
	}
	if _, present, known := snapshotAttr(d, rel); known {
		return present, true
	}
	if ev.known.Exists == nil {
		return false, false
	}
	e, err := ev.known.Exists(rel)
	return e, err == nil
}

// evalParents decides KERNELS, SUBSYSTEMS, DRIVERS, ATTRS and TAGS, which
// hold when the device or any of its parents matches. The device itself is
// known; parents are known to be none only for a disk directly under
// devices/virtual/block; otherwise only a match on the device itself is
// decided, and ATTRS{model} and ATTRS{vendor}, from the disk's model and
// vendor when known: they are read from the one parent that has such files
// (the SCSI device, the NVMe controller); the host, target and PCI
// devices above have none.
func (ev udevEvent) evalParents(t udevToken, st *udevState) verdict {
	d := ev.dev
	virtual := noParent(d)
	var self string
	selfKnown, selfPresent := true, true
	switch t.typ {
	case tkParentsKernel:
		self = d.Name
	case tkParentsSubsystem:
		self = "block"
	case tkParentsDriver:
		selfPresent = false
	case tkParentsAttr:
		if strings.HasPrefix(t.attr, "[") || strings.ContainsAny(t.attr, "%$") {
			return unknown
		}
		self, selfPresent, selfKnown = ev.attr(st, t.attr)
		self = trimAttr(t, self)
		if !virtual && (t.attr == "model" || t.attr == "vendor") {
			v := d.Model
			if t.attr == "vendor" {
				v = d.Vendor
			}
			if v == "" {
				return unknown
			}
			if matchUdevValue(t, trimAttr(t, v)) {
				return holds
			}
			return fails
		}
	}
	switch {
	case !selfKnown:
		return unknown
	case selfPresent && matchUdevValue(t, self):
		return holds
	case virtual:
		return fails // no parent could match instead
	}
	return unknown
}

// matchUdevValue applies t's pattern to s as udevd 252 does
// (udev-rules.c rule_line_add_token and token_match_string): "?*" is
// "not empty"; '|' separates alternatives, an empty one matching an empty
// string; a pattern with '*', '?' or '[' is a glob for each alternative,
// else each is compared as it is; SUBSYSTEM=="subsystem" (or "bus",
// "class") matches those three words; != is the opposite.
func matchUdevValue(t udevToken, s string) bool {
	pattern, negate := t.value, t.negate
	if pattern == "?*" {
		pattern, negate = "", !negate
	}
	var match bool
	switch {
	case t.typ == tkSubsystem && (pattern == "subsystem" || pattern == "bus" || pattern == "class"):
		match = s == "subsystem" || s == "bus" || s == "class"
	case pattern == "":
		match = s == ""
	case t.typ >= tkTest && t.typ != tkResult:
		match = pattern == s // not split into alternatives
	default:
		glob := strings.ContainsAny(pattern, "*?[")
		var alts []string
		empty, bar := false, true
		cur := 0
		for i := 0; i < len(pattern); i++ {
			if pattern[i] != '|' {
				bar = false
				continue
			}
			if bar {
				empty = true
			} else {
				alts = append(alts, pattern[cur:i])
			}
			bar = true
			cur = i + 1
		}
		if bar {
			empty = true
		} else {
			alts = append(alts, pattern[cur:])
		}
		match = empty && s == ""
		for _, a := range alts {
			if match {
				break
			}
			if glob {
				match = fnmatch(a, s)
			} else {
				match = a == s
			}
		}
	}
	return match != negate
}

// substitutions udevd 252 knows (udev-event.c map), in the order it tries
// the $names.
var udevSubsts = []struct {
	name string
	fmt  byte
}{
	{"devnode", 'N'}, {"tempnode", 'N'}, {"attr", 's'}, {"sysfs", 's'}, {"env", 'E'},
	{"kernel", 'k'}, {"number", 'n'}, {"driver", 'd'}, {"devpath", 'p'}, {"id", 'b'},
	{"major", 'M'}, {"minor", 'm'}, {"result", 'c'}, {"parent", 'P'}, {"name", 'D'},
	{"links", 'L'}, {"root", 'r'}, {"sys", 'S'},
}

// format applies udevd 252's substitutions to s (udev-event.c
// udev_event_apply_format): $name or %c, with {arg} where the
// substitution takes one, $$ and %% for the characters themselves, and
// an unknown $ or % kept as it is. What the path and the snapshot know is
// put in; a substitution whose value is not known here is left as
// written and named in the list returned. A malformed one ends the value
// there, as in udevd.
func (ev udevEvent) format(st *udevState, s string) (string, []string) {
	var b strings.Builder
	var open []string
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' && c != '%' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == c {
			b.WriteByte(c)
			i += 2
			continue
		}
		kind, q := byte(0), -1
		for _, m := range udevSubsts {
			if c == '$' && strings.HasPrefix(s[i+1:], m.name) {
				kind, q = m.fmt, i+1+len(m.name)
				break
			}
			if c == '%' && i+1 < len(s) && s[i+1] == m.fmt {
				kind, q = m.fmt, i+2
				break
			}
		}
		if q < 0 {
			b.WriteByte(c)
			i++
			continue
		}
		arg := ""
		if q < len(s) && s[q] == '{' {
			end := strings.IndexByte(s[q+1:], '}')
			if end <= 0 || end >= 1024 {
				return b.String(), open // udevd: "Invalid format string"
			}
			arg = s[q+1 : q+1+end]
			q += end + 2
		}
		written := s[i:q]
		i = q
		v, known, ok := ev.subst(st, kind, arg)
		if !ok {
			return b.String(), open // udevd: "Failed to substitute"
		}
		if !known {
			open = append(open, written)
			b.WriteString(written)
			continue
		}
		b.WriteString(v)
	}
	return b.String(), open
}

// subst is one substitution's value: whether it is known here, and false
// ok where udevd fails it.
func (ev udevEvent) subst(st *udevState, kind byte, arg string) (v string, known, ok bool) {
	d := ev.dev
	switch kind {
	case 'N':
		v, known := envValue(d, "DEVNAME")
		return v, known, true
	case 's':
		if arg == "" {
			return "", false, false
		}
		if strings.HasPrefix(arg, "[") {
			return "", false, true
		}
		v, present, known := ev.attr(st, arg)
		switch {
		case !known:
			return "", false, true
		case !present:
			// udevd then reads the parent a parent key matched.
			return "", !st.parents || noParent(d), true
		}
		return replaceUdevChars(strings.TrimRight(v, " \t\n\r\v\f"), "/ $%?,"), true, true
	case 'E':
		if arg == "" {
			return "", false, false
		}
		v, known := ev.env(st, arg)
		return v, known, true
	case 'k':
		return d.Name, true, true
	case 'n':
		i := len(d.Name)
		for i > 0 && d.Name[i-1] >= '0' && d.Name[i-1] <= '9' {
			i--
		}
		return d.Name[i:], true, true
	case 'd':
		return "", !st.parents || noParent(d), true
	case 'b':
		switch {
		case !st.parents:
			return "", true, true
		case noParent(d):
			return d.Name, true, true
		}
		return "", false, true
	case 'p':
		return "/" + d.Path, d.Path != "", true
	case 'M', 'm':
		key := "MAJOR"
		if kind == 'm' {
			key = "MINOR"
		}
		v, known := envValue(d, key)
		return v, known, true
	case 'c':
		if arg != "" {
			if _, err := strconv.ParseUint(strings.TrimSuffix(arg, "+"), 10, 32); err != nil {
				return "", false, false
			}
		}
		return "", !st.program, true
	case 'P':
		return "", noParent(d), true
	case 'D':
		v, known := envValue(d, "DEVNAME")
		return strings.TrimPrefix(v, "/dev/"), known, true
	case 'L':
		return "", false, true
	case 'r':
		return "/dev", true, true
	case 'S':
		return "/sys", true, true
	}
	return "", false, true
}

// replaceUdevChars replaces what udevd does not let through into a value
// read from sysfs (shared/udev-util.c udev_replace_chars): letters,
// digits, "#+-.:=@_", the characters of white, multi-byte UTF-8 and "\x"
// escapes stay; a blank becomes ' ' where white has one; anything else
// becomes '_'.
func replaceUdevChars(s, white string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', strings.IndexByte("#+-.:=@_", c) >= 0, strings.IndexByte(white, c) >= 0:
			i++
			continue
		case c == '\\' && i+1 < len(b) && b[i+1] == 'x':
			i += 2
			continue
		case c >= 0x80:
			if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError && n > 1 {
				i += n
				continue
			}
		case strings.IndexByte(" \t\n\v\f\r", c) >= 0 && strings.IndexByte(white, ' ') >= 0:
			b[i] = ' '
			i++
			continue
		}
		b[i] = '_'
		i++
	}
	return string(b)
}

// apply does r's assignments on the path st (r's conditions held, or are
// assumed to): properties first, then attribute writes, as udevd's token
// order has them. sure is whether the conditions held without an
// assumption on this line; open are those not decided.
func (ev udevEvent) apply(file, rule int, r *udevRule, st *udevState, sure bool, open []string) {
	replace := false
	for ti, t := range r.tokens {
		switch t.typ {
		case tkOptionsEscapeReplace:
			replace = true
		case tkAssignDevlink:
			st.links = true
		case tkAssignTag:
			st.tags = true
		case tkAssignEnv:
			if st.lost {
				// Whether this rule runs on the path is not known.
				st.env[t.attr] = envVal{}
				continue
			}
			if t.value == "" {
				if !t.add {
					st.env[t.attr] = envVal{known: true}
				}
				continue
			}
			v, vopen := ev.format(st, t.value)
			if replace {
				v = replaceUdevChars(v, "")
			}
			known := len(vopen) == 0
			if t.add {
				if old, ok := ev.env(st, t.attr); !ok {
					known = false
				} else if old != "" {
					v = old + " " + v
				}
			}
			st.env[t.attr] = envVal{v: v, known: known}
		case tkAssignAttr:
			v, vopen := ev.format(st, t.value)
			st.written[strings.Trim(t.attr, "/")] = ev.readBack(st, t, v, len(vopen) == 0, sure && !st.lost)
			if t.queue == "" {
				continue
			}
			if len(vopen) == 0 && len(v) >= udevNameSize {
				continue // udevd refuses a value cut to its buffer
			}
			st.recs = append(st.recs, udevWriteRec{file: file, rule: rule, tok: ti, value: strings.TrimSpace(v),
				unknownValue: vopen, sure: sure && !st.lost, open: open})
		}
	}
}

// readBack is what reading an attribute gives after a rule wrote v to
// it (known: v is; certain: the write is made on this path). It is
// known only for the scheduler on a disk whose offered schedulers the
// snapshot holds: the kernel then shows v in brackets among them, or,
// when the disk does not offer v, what it showed before (the write
// fails). A write that may not be made leaves either.
func (ev udevEvent) readBack(st *udevState, t udevToken, v string, known, certain bool) readVal {
	d := ev.dev
	if t.queue != "scheduler" || len(d.Schedulers) == 0 || !known || slices.Contains(ev.known.Written, "scheduler") {
		return readVal{}
	}
	before, present, beforeKnown := ev.attrAlts(st, t.attr)
	if !beforeKnown || !present {
		return readVal{}
	}
	v = strings.TrimSpace(v)
	after := before
	if slices.Contains(d.Schedulers, v) {
		after = []string{schedulerFile(v, d.Schedulers)}
	}
	if certain {
		return readVal{alts: after, known: true}
	}
	alts := slices.Clone(before)
	for _, a := range after {
		if !slices.Contains(alts, a) {
			alts = append(alts, a)
		}
	}
	return readVal{alts: alts, known: true}
}

// setsEnv reports whether r sets a property: a path where r applies and
// one where it does not differ after it.
func (r *udevRule) setsEnv() bool {
	for _, t := range r.tokens {
		if t.typ == tkAssignEnv {
			return true
		}
	}
	return false
}

// run follows the paths an event takes through f from st: where a rule
// whose conditions are not decided has a GOTO or sets a property, both
// ways, up to paths of them. It returns the paths at the file's end.
func (ev udevEvent) run(fi int, f *udevFile, st *udevState, paths int) []*udevState {
	type path struct {
		st  *udevState
		pos int
	}
	var done []*udevState
	stack := []path{{st, 0}}
	budget := paths - 1
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for p.pos < len(f.rules) {
			r := f.rules[p.pos]
			v, open := ev.evalMatches(r, p.st)
			if v == fails {
				p.pos++
				continue
			}
			sure := v == holds
			if v == unknown && (r.gotoIdx >= 0 || r.setsEnv()) {
				if budget > 0 {
					budget--
					other := p.st.clone()
					other.assumed = append(other.assumed, negation(open))
					stack = append(stack, path{other, p.pos + 1})
					p.st.assumed = append(p.st.assumed, open...)
					sure = true // on this path, they hold
				} else {
					p.st.lost = true
					ev.apply(fi, p.pos, r, p.st, false, open)
					p.pos++
					continue
				}
			}
			ev.apply(fi, p.pos, r, p.st, sure, open)
			if sure && r.gotoIdx >= 0 {
				p.pos = r.gotoIdx
				continue
			}
			p.pos++
		}
		done = append(done, p.st)
	}
	return done
}

// negation words "these conditions do not all hold".
func negation(open []string) string {
	if len(open) == 1 {
		return "not " + open[0]
	}
	return "not all of (" + strings.Join(open, ", ") + ")"
}

// merge is the state after paths that end at one place: a property known
// only where every path agrees on it.
func (ev udevEvent) merge(paths []*udevState) *udevState {
	if len(paths) == 1 {
		p := paths[0]
		p.recs, p.assumed, p.lost = nil, nil, false
		return p
	}
	m := &udevState{env: map[string]envVal{}, written: map[string]readVal{}}
	keys := map[string]bool{}
	for _, p := range paths {
		for k := range p.env {
			keys[k] = true
		}
		for k, v := range p.written {
			if old, ok := m.written[k]; ok && !old.equal(v) {
				v = readVal{}
			}
			m.written[k] = v
		}
		m.anyEnv = m.anyEnv || p.anyEnv
		m.links = m.links || p.links
		m.tags = m.tags || p.tags
		for _, g := range p.taint {
			if !slices.Contains(m.taint, g) {
				m.taint = append(m.taint, g)
			}
		}
		m.program = m.program || p.program
		m.parents = m.parents || p.parents
	}
	for k := range keys {
		v0, k0 := ev.env(paths[0], k)
		same := k0
		for _, p := range paths[1:] {
			v, kn := ev.env(p, k)
			same = same && kn && v == v0
		}
		m.env[k] = envVal{v: v0, known: same}
	}
	return m
}

// udevWrites runs every rules file for d on an add and on a change event
// and words the writes found: one Write per rule, value and certainty.
func (s *Set) udevWrites(d *sysfs.Device, k Known) []Write {
	if !s.udevWrite {
		return nil
	}
	type key struct {
		file, rule, tok int
		value           string
		possible        bool
	}
	found := map[key]*Write{}
	var order []key
	for _, action := range []string{"add", "change"} {
		ev := udevEvent{action: action, dev: d, known: k, arch: s.udevArch}
		st := &udevState{env: map[string]envVal{}, written: map[string]readVal{}}
		for fi, f := range s.udev {
			st.recs, st.assumed, st.lost = nil, nil, false
			if !f.writes() {
				// A file that writes no queue attribute is followed one
				// way only, for the properties it sets: past a GOTO whose
				// conditions are not known, what it sets is not known.
				st = ev.merge(ev.run(fi, f, st, 1))
				continue
			}
			paths := ev.run(fi, f, st, max(1, min(maxUdevPaths, maxUdevSteps/len(f.rules))))
			for _, w := range ev.words(fi, f, paths) {
				k := key{fi, w.rule, w.tok, w.Value, w.Possible}
				if found[k] == nil {
					w.Write.Actions = nil
					found[k] = &w.Write
					order = append(order, k)
				}
				fw := found[k]
				fw.Actions = append(fw.Actions, action)
				for _, u := range w.Unknown {
					if !slices.Contains(fw.Unknown, u) {
						fw.Unknown = append(fw.Unknown, u)
					}
				}
			}
			st = ev.merge(paths)
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.file != b.file {
			return a.file - b.file
		}
		if a.rule != b.rule {
			return a.rule - b.rule
		}
		return a.tok - b.tok
	})
	out := make([]Write, 0, len(order))
	for _, k := range order {
		out = append(out, *found[k])
	}
	return out
}

// siteWrite is a Write with the rule and token it comes from.
type siteWrite struct {
	Write
	rule, tok int
}

// words turns the writes the paths through f made into Writes: a write
// is certain when every path makes it, with the same known value and
// without an assumption on its own rule; else it is possible, on the
// conditions its own rule leaves open and those every path to it
// assumed.
func (ev udevEvent) words(fi int, f *udevFile, paths []*udevState) []siteWrite {
	type site struct {
		rule, tok int
		value     string
	}
	type acc struct {
		recs    []udevWriteRec
		reached []*udevState
	}
	byValue := map[site]*acc{}
	var order []site
	for _, p := range paths {
		seen := map[site]bool{}
		for _, r := range p.recs {
			s := site{r.rule, r.tok, r.value}
			if byValue[s] == nil {
				byValue[s] = &acc{}
				order = append(order, s)
			}
			a := byValue[s]
			a.recs = append(a.recs, r)
			if !seen[s] {
				seen[s] = true
				a.reached = append(a.reached, p)
			}
		}
	}
	var out []siteWrite
	for _, s := range order {
		a := byValue[s]
		r := f.rules[s.rule]
		t := r.tokens[s.tok]
		w := Write{Kind: UdevRule, File: f.path, Line: t.line, RuleLine: r.line, Attribute: t.queue, Value: s.value}
		certain := len(a.reached) == len(paths)
		for _, rec := range a.recs {
			certain = certain && rec.sure
			for _, u := range rec.unknownValue {
				if !slices.Contains(w.UnknownValue, u) {
					w.UnknownValue = append(w.UnknownValue, u)
				}
			}
			for _, u := range rec.open {
				if !slices.Contains(w.Unknown, u) {
					w.Unknown = append(w.Unknown, u)
				}
			}
		}
		if !certain {
			w.Possible = true
			common := slices.Clone(a.reached[0].assumed)
			for _, p := range a.reached[1:] {
				common = slices.DeleteFunc(common, func(c string) bool { return !slices.Contains(p.assumed, c) })
			}
			for _, c := range common {
				if !slices.Contains(w.Unknown, c) {
					w.Unknown = append(w.Unknown, c)
				}
			}
			if len(w.Unknown) == 0 {
				w.Reason = "on some of the paths through the rules, which take conditions not known here"
			}
		} else {
			w.Unknown = nil
		}
		out = append(out, siteWrite{w, s.rule, s.tok})
	}
	return out
}

// attrValue is a sysfs attribute of the disk as udevd would read it for
// ATTR{}: its value, whether the file exists, and whether that can be told
// here: from the snapshot, else from k.Attr. An attribute the policy
// writes is not known (iosched and udevd race to it). Trailing blanks are
// trimmed, as udevd trims them.
func (k Known) attrValue(d *sysfs.Device, attr string) (value string, present, known bool) {
	attr = strings.Trim(attr, "/")
	if name, ok := queueAttr(attr); ok && slices.Contains(k.Written, name) {
		return "", false, false
	}
	if value, present, known = snapshotAttr(d, attr); known {
		return value, present, known
	}
	if k.Attr == nil {
		return "", false, false
	}
	v, present, err := k.Attr(attr)
	if err != nil {
		return "", false, false
	}
	return strings.TrimRight(v, " \t\n\r"), present, true
}

// snapshotAttr is attrValue from the snapshot alone.
func snapshotAttr(d *sysfs.Device, attr string) (value string, present, known bool) {
	optBool := func(b *bool) (string, bool, bool) {
		if b == nil {
			return "", false, false
		}
		if *b {
			return "1", true, true
		}
		return "0", true, true
	}
	switch attr {
	case "queue/rotational":
		return optBool(d.Rotational)
	case "removable":
		return optBool(d.Removable)
	case "queue/zoned":
		return d.Zoned, d.Zoned != "", d.Zoned != ""
	case "size":
		if d.SizeBytes == nil {
			return "", false, false
		}
		return strconv.FormatUint(*d.SizeBytes/512, 10), true, true
	case "queue/scheduler":
		switch {
		case d.Scheduler != nil:
			return schedulerFile(*d.Scheduler, d.Schedulers), true, true
		case d.BioBased():
			return "", false, true
		}
		return "", false, false
	case "dev":
		return d.MajorMinor, d.MajorMinor != "", d.MajorMinor != ""
	}
	if name, ok := strings.CutPrefix(attr, "queue/"); ok {
		if v, ok := d.Tunables[name]; ok {
			return v, true, true
		}
	}
	return "", false, false
}

// schedulerFile is queue/scheduler's text: every scheduler offered, the
// active one in brackets (block/elevator.c elv_iosched_show).
func schedulerFile(active string, offered []string) string {
	parts := make([]string, len(offered))
	for i, s := range offered {
		if s == active {
			s = "[" + s + "]"
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}

// noParent reports whether the disk has no parent device: it sits in
// devices/virtual/block, whose directories above are not devices (loop,
// dm, md, zram, brd, ...). An NVMe multipath head, under
// devices/virtual/nvme-subsystem/nvme-subsysN, has one.
func noParent(d *sysfs.Device) bool {
	return d.Path == "devices/virtual/block/"+d.Name
}
