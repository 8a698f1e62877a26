package conflicts

// fnmatch reports whether s matches the shell pattern p as fnmatch(3) does
// with no flags, which is how udevd (src/udev/udev-rules.c
// token_match_string) and tuned (Python's fnmatch) match names: '*' and '?'
// match any character including '/', "[...]" is a set ("[!...]" or "[^...]"
// its complement, "a-z" a range), and a backslash quotes the next character.
// A malformed set ("[" with no "]") matches a literal '['.
func fnmatch(p, s string) bool {
	// Iterative, with one star to backtrack to: patterns are short.
	var starP, starS = -1, 0
	pi, si := 0, 0
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				starP, starS = pi, si
				pi++
				continue
			case '?':
				pi++
				si++
				continue
			case '[':
				if ok, n, valid := matchSet(p[pi:], s[si]); valid {
					if ok {
						pi += n
						si++
						continue
					}
				} else if s[si] == '[' {
					pi++
					si++
					continue
				}
			case '\\':
				if pi+1 < len(p) && p[pi+1] == s[si] {
					pi += 2
					si++
					continue
				}
			default:
				if c == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP+1, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchSet matches c against the set at the start of p ("[...]"): whether
// it matched, how many bytes of p the set takes, and whether it is a set
// at all (closed by a ']').
func matchSet(p string, c byte) (matched bool, n int, valid bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		lo := p[i]
		if lo == '\\' && i+1 < len(p) {
			i++
			lo = p[i]
		}
		hi := lo
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			hi = p[i+2]
			i += 2
		}
		if lo <= c && c <= hi {
			matched = true
		}
		i++
	}
	return false, 0, false
}
