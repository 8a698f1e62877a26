package policy

import (
	"fmt"
	"strings"
)

// suggest returns the candidate closest to s when it is a plausible typo:
// at most two edits away (or a quarter of the candidate, for long names such
// as uevent_source) and fewer than half the candidate's length, so that short
// keys do not suggest unrelated ones.
func suggest(s string, candidates []string) (string, bool) {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if len(s) >= 4 && strings.HasPrefix(c, s) {
			d = 1 // a truncated name: "reconcile" for "reconcile_interval"
		}
		if d > max(2, len(c)/4) || 2*d >= len(c) {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, bestDist >= 0
}

// levenshtein is the edit distance between a and b, counting bytes.
func levenshtein(a, b string) int {
	if len(a) < len(b) {
		a, b = b, a
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// unknownMsg is the message for a name that is not one of valid: a
// suggestion when one is close, else the valid names.
func unknownMsg(what, name string, valid []string) string {
	if s, ok := suggest(name, valid); ok {
		return fmt.Sprintf("%s; did you mean %q?", what, s)
	}
	return fmt.Sprintf("%s (valid: %s)", what, strings.Join(valid, ", "))
}
