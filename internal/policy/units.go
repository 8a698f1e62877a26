package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are binary: K is KiB, as in lsblk, dd and the kernel's own
// *_kb files. Decimal units (KB, GB) are refused rather than guessed.
var sizeUnits = []struct {
	names []string
	shift uint
}{
	{[]string{"", "b"}, 0},
	{[]string{"k", "kib"}, 10},
	{[]string{"m", "mib"}, 20},
	{[]string{"g", "gib"}, 30},
	{[]string{"t", "tib"}, 40},
	{[]string{"p", "pib"}, 50},
}

const sizeSyntax = "want a whole number of bytes or with a unit: B, K or KiB, M or MiB, G or GiB, T or TiB, P or PiB (all powers of 1024)"

// parseBytes reads a size: an integer (bytes) or a string such as "1GiB".
func parseBytes(v any) (uint64, error) {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return 0, fmt.Errorf("%d is negative", v)
		}
		return uint64(v), nil
	case string:
		s := strings.TrimSpace(v)
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("%q is not a size: %s", v, sizeSyntax)
		}
		n, err := strconv.ParseUint(s[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is too large", v)
		}
		unit := strings.ToLower(strings.TrimSpace(s[i:]))
		switch unit {
		case "kb", "mb", "gb", "tb", "pb":
			return 0, fmt.Errorf("%q is ambiguous (decimal or binary?): write %q (powers of 1024) or a byte count", v, s[:i]+strings.ToUpper(unit[:1])+"iB")
		}
		for _, u := range sizeUnits {
			if contains(u.names, unit) {
				if n > math.MaxUint64>>u.shift {
					return 0, fmt.Errorf("%q is too large", v)
				}
				return n << u.shift, nil
			}
		}
		return 0, fmt.Errorf("%q is not a size: %s", v, sizeSyntax)
	}
	return 0, fmt.Errorf(`want a size such as "1GiB" or a byte count, not %s`, typeName(v))
}

// formatBytes writes n in the largest binary unit that divides it exactly.
func formatBytes(n uint64) string {
	for i := len(sizeUnits) - 1; i > 0; i-- {
		u := sizeUnits[i]
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + strings.ToUpper(u.names[1][:1]) + "iB"
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}
