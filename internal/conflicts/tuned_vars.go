package conflicts

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// tunedVars is tuned 2.20's variable and function expansion
// (tuned/profiles/variables.py and functions/functions.py): ${NAME} from
// [variables], then ${f:NAME:ARG:...} built-in functions. Functions whose
// value depends on the machine or that run a command are not evaluated:
// as where tuned gets no value from a function, the text is left as
// written, and a note says so. ${f:virt_check} is the one such function a
// shipped profile takes an include from, so it is evaluated both ways:
// vm says which way this pass takes.
type tunedVars struct {
	names  []string
	values map[string]tunedText
	vm     bool
	// virtSeen is the first ${f:virt_check} met and where, "" if none:
	// the caller then knows one pass is enough.
	virtSeen string
}

// tunedText is an expanded value and what could not be evaluated in it.
type tunedText struct {
	s     string
	notes []string
}

// errTunedAssertion is a failed ${f:assertion...}: tuned refuses the
// profile.
type errTunedAssertion struct{ msg string }

func (e errTunedAssertion) Error() string { return e.msg }

var tunedVarName = regexp.MustCompile(`^\w+\n?$`)

// add defines a variable as Variables.add_variable does: its value
// expanded with the variables defined before it.
func (v *tunedVars) add(name string, value tunedOption) error {
	if !tunedVarName.MatchString(name) {
		return nil // tuned logs "contains unallowed characters"
	}
	t, err := v.expand(value.value, value)
	if err != nil {
		return err
	}
	if _, ok := v.values[name]; !ok {
		v.names = append(v.names, name)
	}
	if v.values == nil {
		v.values = map[string]tunedText{}
	}
	v.values[name] = t
	return nil
}

// expand is Variables.expand: ${NAME} not preceded by a backslash is
// replaced in one pass, \${NAME} becomes ${NAME}, then functions are
// evaluated. at is the option the text comes from, for notes.
func (v *tunedVars) expand(s string, at tunedOption) (tunedText, error) {
	var notes []string
	if len(v.names) > 0 {
		var b strings.Builder
		for i := 0; i < len(s); {
			if strings.HasPrefix(s[i:], "${") && (i == 0 || s[i-1] != '\\') {
				if end := strings.IndexByte(s[i:], '}'); end > 0 {
					if t, ok := v.values[s[i+2:i+end]]; ok {
						b.WriteString(t.s)
						notes = appendNew(notes, t.notes...)
						i += end + 1
						continue
					}
				}
			}
			b.WriteByte(s[i])
			i++
		}
		s = b.String()
	}
	s = unescapeVar.ReplaceAllString(s, "$1")
	if s == "" {
		return tunedText{s: s, notes: notes}, nil
	}
	out, fnotes, err := v.functions(s, at)
	if err != nil {
		return tunedText{}, err
	}
	out = unescapeFunc.ReplaceAllString(out, "$1")
	return tunedText{s: out, notes: appendNew(notes, fnotes...)}, nil
}

var (
	unescapeVar  = regexp.MustCompile(`\\(\$\{\w+\})`)
	unescapeFunc = regexp.MustCompile(`\\(\$\{f:.*\})`)
	funcName     = regexp.MustCompile(`^\w+\n?$`)
)

// functions is Functions._process: a scan that keeps a stack of "${"
// positions and, at each "}", evaluates the function that opened there
// (unless its '$' was escaped), innermost first.
func (v *tunedVars) functions(s string, at tunedOption) (string, []string, error) {
	type pos struct {
		esc bool
		at  int
	}
	var (
		stack []pos
		esc   bool
		notes []string
	)
	for cnt := 0; cnt < len(s); cnt++ {
		switch {
		case s[cnt] == '}':
			if len(stack) == 0 {
				return s, notes, nil // tuned: "non pair '}'", the text as it is
			}
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if !p.esc {
				res, ok, note, err := v.call(s[p.at:cnt], at)
				if err != nil {
					return "", nil, err
				}
				notes = appendNew(notes, note...)
				if ok {
					s = s[:p.at] + res + s[cnt+1:]
					cnt += len(res) - (cnt - p.at + 1)
					if cnt < 0 {
						cnt = 0
					}
				}
			}
		case strings.HasPrefix(s[cnt:], "${"):
			stack = append(stack, pos{esc, cnt})
		}
		esc = cnt < len(s) && s[cnt] == '\\'
	}
	return s, notes, nil
}

// call evaluates one "${f:name:args" (without its '}'): the result and
// whether tuned would substitute one.
func (v *tunedVars) call(text string, at tunedOption) (string, bool, []string, error) {
	// re.split(r'(?<!\\):', ...): a colon not after a backslash.
	var sl []string
	last := 0
	for i := 0; i < len(text); i++ {
		if text[i] == ':' && (i == 0 || text[i-1] != '\\') {
			sl = append(sl, text[last:i])
			last = i + 1
		}
	}
	sl = append(sl, text[last:])
	if sl[0] != "${f" || len(sl) < 2 {
		return "", false, nil, nil
	}
	for i := range sl {
		sl[i] = strings.ReplaceAll(sl[i], `\:`, ":")
	}
	name, args := sl[1], sl[2:]
	if !funcName.MatchString(name) {
		return "", false, nil, nil
	}
	nargs, known := tunedFuncArgs[name]
	if !known {
		return "", false, nil, nil // "function not implemented": left as written
	}
	if (nargs[0] != 0 && len(args) > nargs[0]) || len(args) < nargs[1] {
		return "", false, nil, nil // "invalid number of arguments"
	}
	where := at.file + ":" + strconv.Itoa(at.line)
	switch name {
	case "virt_check":
		// The pass's note says which way it took (loadTuned).
		if v.virtSeen == "" {
			v.virtSeen = fmt.Sprintf("${f:virt_check:%s:%s} at %s", args[0], args[1], where)
		}
		if v.vm {
			return args[0], true, nil, nil
		}
		return args[1], true, nil, nil
	case "strip":
		return strings.TrimSpace(strings.Join(args, "")), true, nil, nil
	case "kb2s", "s2kb":
		n, err := pyInt(args[0])
		if err != nil {
			return "", false, nil, nil
		}
		if name == "kb2s" {
			return strconv.FormatInt(n*2, 10), true, nil, nil
		}
		// int(round(n / 2)): Python rounds halves to even.
		q := n / 2
		if n%2 != 0 {
			lo := q
			if n < 0 {
				lo = q - 1
			}
			q = lo
			if lo%2 != 0 {
				q = lo + 1
			}
		}
		return strconv.FormatInt(q, 10), true, nil, nil
	case "regex_search_ternary":
		re, err := regexp.Compile(args[1])
		if err != nil {
			return "", false, []string{fmt.Sprintf("tuned would evaluate ${f:regex_search_ternary} at %s with a pattern Go cannot read (%q); its value is left as written", where, args[1])}, nil
		}
		if re.MatchString(args[0]) {
			return args[2], true, nil, nil
		}
		return args[3], true, nil, nil
	case "assertion":
		if args[1] != args[2] {
			return "", false, nil, errTunedAssertion{fmt.Sprintf("%s: tuned's ${f:assertion} %q fails (%q != %q), so tuned refuses the profile", where, args[0], args[1], args[2])}
		}
		return "", false, nil, nil
	case "assertion_non_equal":
		if args[1] == args[2] {
			return "", false, nil, errTunedAssertion{fmt.Sprintf("%s: tuned's ${f:assertion_non_equal} %q fails (both %q), so tuned refuses the profile", where, args[0], args[1])}
		}
		return "", false, nil, nil
	}
	return "", false, []string{fmt.Sprintf("tuned would evaluate ${f:%s} at %s on the machine; its value is not known here and is shown as written", name, where)}, nil
}

// tunedFuncArgs are tuned 2.20's built-in functions (profiles/functions/)
// and their argument counts: the most (0: any) and the fewest.
var tunedFuncArgs = map[string][2]int{
	"assertion": {3, 3}, "assertion_non_equal": {3, 3}, "calc_isolated_cores": {1, 0},
	"check_net_queue_count": {1, 1}, "cpuinfo_check": {0, 2}, "cpulist2devs": {0, 0},
	"cpulist2hex": {0, 0}, "cpulist2hex_invert": {0, 0}, "cpulist_invert": {0, 0},
	"cpulist_online": {0, 0}, "cpulist_pack": {0, 0}, "cpulist_present": {0, 0},
	"cpulist_unpack": {0, 0}, "exec": {0, 1}, "hex2cpulist": {1, 1}, "kb2s": {1, 1},
	"regex_search_ternary": {4, 4}, "s2kb": {1, 1}, "strip": {0, 1}, "virt_check": {2, 2},
}

// pyInt parses as Python's int() does a decimal: blanks around, a sign,
// underscores between digits.
func pyInt(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "__") || strings.HasPrefix(strings.TrimLeft(s, "+-"), "_") || strings.HasSuffix(s, "_") {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(strings.ReplaceAll(strings.TrimPrefix(s, "+"), "_", ""), 10, 64)
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		found := false
		for _, x := range list {
			found = found || x == it
		}
		if !found {
			list = append(list, it)
		}
	}
	return list
}
