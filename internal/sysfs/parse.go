package sysfs

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseScheduler parses queue/scheduler: "none [mq-deadline] kyber bfq" offers
// four schedulers with mq-deadline active. A bare single word ("none", as old
// kernels show for bio-based queues) is the only one and active. Several words
// without brackets, more than one bracketed word, a name listed twice or one
// that could not be an elevator name are errors.
func ParseScheduler(b []byte) (active string, offered []string, err error) {
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return "", nil, fmt.Errorf("scheduler: empty")
	}
	for _, f := range fields {
		name := f
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") && len(f) > 2 {
			name = f[1 : len(f)-1]
			if active != "" {
				return "", nil, fmt.Errorf("scheduler: more than one active in %q", strings.TrimSpace(string(b)))
			}
			active = name
		}
		if !ValidSchedulerName(name) {
			return "", nil, fmt.Errorf("scheduler: malformed name %q in %q", f, strings.TrimSpace(string(b)))
		}
		for _, o := range offered {
			if o == name {
				return "", nil, fmt.Errorf("scheduler: %s listed twice in %q", name, strings.TrimSpace(string(b)))
			}
		}
		offered = append(offered, name)
	}
	if active == "" {
		if len(fields) > 1 {
			return "", nil, fmt.Errorf("scheduler: no active scheduler marked in %q", strings.TrimSpace(string(b)))
		}
		active = fields[0]
	}
	return active, offered, nil
}

// MainlineSchedulers are the elevators mainline Linux has (block/:
// mq-deadline.c, kyber-iosched.c, bfq-iosched.c) and "none".
func MainlineSchedulers() []string { return []string{"none", "mq-deadline", "kyber", "bfq"} }

// ValidSchedulerName reports whether s looks like a kernel elevator name:
// lower-case letters, digits, '-' and '_', at most 15 bytes
// (ELV_NAME_MAX is 16 with the NUL, include/linux/elevator.h).
func ValidSchedulerName(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// parseUint parses a decimal attribute such as size or rotational.
func parseUint(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	return v, nil
}

// parseBool parses a 0/1 attribute.
func parseBool(b []byte) (bool, error) {
	switch strings.TrimSpace(string(b)) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("not 0 or 1: %q", strings.TrimSpace(string(b)))
}

// parseMajorMinor checks the dev attribute ("253:0").
func parseMajorMinor(b []byte) (string, error) {
	s := strings.TrimSpace(string(b))
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("not major:minor: %q", s)
	}
	if _, err := strconv.ParseUint(maj, 10, 32); err != nil {
		return "", fmt.Errorf("not major:minor: %q", s)
	}
	if _, err := strconv.ParseUint(min, 10, 32); err != nil {
		return "", fmt.Errorf("not major:minor: %q", s)
	}
	return s, nil
}

// ParseMajorMinor checks a device number written "major:minor" (as a uevent's
// MAJOR and MINOR make it) and returns it as the dev attribute shows it.
func ParseMajorMinor(s string) (string, error) { return parseMajorMinor([]byte(s)) }
