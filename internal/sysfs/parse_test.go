package sysfs

import (
	"slices"
	"strings"
	"testing"
)

func TestParseScheduler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		active  string
		offered []string
		err     string // substring of the error; "" means success
	}{
		{name: "mq-deadline active", in: "none [mq-deadline] kyber bfq\n", active: "mq-deadline", offered: []string{"none", "mq-deadline", "kyber", "bfq"}},
		{name: "none active", in: "[none] mq-deadline kyber bfq \n", active: "none", offered: []string{"none", "mq-deadline", "kyber", "bfq"}},
		{name: "last active, no bfq", in: "none mq-deadline [kyber]", active: "kyber", offered: []string{"none", "mq-deadline", "kyber"}},
		{name: "bare none, old bio-based queue", in: "none\n", active: "none", offered: []string{"none"}},
		{name: "bare bracketed single", in: "[none]\n", active: "none", offered: []string{"none"}},
		{name: "trailing space and newline", in: "none [bfq] \n", active: "bfq", offered: []string{"none", "bfq"}},
		{name: "tabs and several spaces", in: "none\t[mq-deadline]   kyber", active: "mq-deadline", offered: []string{"none", "mq-deadline", "kyber"}},
		{name: "several words, no brackets", in: "none mq-deadline kyber\n", err: "no active scheduler marked"},
		{name: "two bracketed", in: "[none] [mq-deadline]\n", err: "more than one active"},
		{name: "empty", in: "", err: "empty"},
		{name: "only newline", in: "\n", err: "empty"},
		{name: "empty brackets", in: "none []", err: "malformed name"},
		{name: "unclosed bracket", in: "none [mq-deadline kyber", err: "malformed name"},
		{name: "upper case", in: "[NONE]", err: "malformed name"},
		{name: "name too long", in: "[none] abcdefghijklmnop", err: "malformed name"},
		{name: "listed twice", in: "[none] none", err: "listed twice"},
		{name: "path-like", in: "[../x]", err: "malformed name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			active, offered, err := ParseScheduler([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseScheduler(%q) = %q, %q, %v; want error containing %q", tt.in, active, offered, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseScheduler(%q): %v", tt.in, err)
			}
			if active != tt.active || !slices.Equal(offered, tt.offered) {
				t.Fatalf("ParseScheduler(%q) = %q, %q; want %q, %q", tt.in, active, offered, tt.active, tt.offered)
			}
		})
	}
}

// FuzzParseScheduler checks the parser never panics and that what it accepts
// is consistent: the active scheduler is one of those offered, each offered
// once, each a valid name.
func FuzzParseScheduler(f *testing.F) {
	for _, s := range []string{"none [mq-deadline] kyber bfq\n", "none", "[none]", "", "[a] [b]", "[[x]]", "a b c"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		active, offered, err := ParseScheduler(b)
		if err != nil {
			return
		}
		if !slices.Contains(offered, active) {
			t.Fatalf("active %q not in offered %q", active, offered)
		}
		seen := map[string]bool{}
		for _, o := range offered {
			if !ValidSchedulerName(o) || seen[o] {
				t.Fatalf("offered %q: bad or repeated %q", offered, o)
			}
			seen[o] = true
		}
	})
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	good := []string{"vda", "nvme0n1", "dm-0", "md_home", "cciss!c0d0", "loop7100", strings.Repeat("a", 255)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{"", ".", "..", "a/b", "/vda", "../vda", "vda/", "vd\x00a", strings.Repeat("a", 256)}
	for _, n := range bad {
		if err := ValidateName(n); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", n)
		}
	}
}

func TestParseAttributes(t *testing.T) {
	t.Parallel()
	if v, err := parseUint([]byte("41943040\n")); err != nil || v != 41943040 {
		t.Errorf("parseUint = %d, %v", v, err)
	}
	for _, s := range []string{"-1", "banana", "", "0x200", "1.5", "18446744073709551616"} {
		if _, err := parseUint([]byte(s)); err == nil {
			t.Errorf("parseUint(%q) accepted", s)
		}
	}
	for in, want := range map[string]bool{"0\n": false, "1\n": true, " 1 ": true} {
		if v, err := parseBool([]byte(in)); err != nil || v != want {
			t.Errorf("parseBool(%q) = %v, %v", in, v, err)
		}
	}
	for _, s := range []string{"2", "yes", "", "banana"} {
		if _, err := parseBool([]byte(s)); err == nil {
			t.Errorf("parseBool(%q) accepted", s)
		}
	}
	if mm, err := parseMajorMinor([]byte("259:0\n")); err != nil || mm != "259:0" {
		t.Errorf("parseMajorMinor = %q, %v", mm, err)
	}
	for _, s := range []string{"254-48", "8:", ":0", "a:b", "8:0:1", ""} {
		if _, err := parseMajorMinor([]byte(s)); err == nil {
			t.Errorf("parseMajorMinor(%q) accepted", s)
		}
	}
}

func TestNaturalLess(t *testing.T) {
	t.Parallel()
	in := []string{"loop10", "sdb", "nvme10n1", "loop2", "sda", "nvme2n1", "dm-1", "loop0", "nvme1c1n1", "nvme1n1", "dm-10", "sdaa"}
	want := []string{"dm-1", "dm-10", "loop0", "loop2", "loop10", "nvme1c1n1", "nvme1n1", "nvme2n1", "nvme10n1", "sda", "sdaa", "sdb"}
	slices.SortFunc(in, func(a, b string) int {
		switch {
		case naturalLess(a, b):
			return -1
		case naturalLess(b, a):
			return 1
		}
		return 0
	})
	if !slices.Equal(in, want) {
		t.Fatalf("sorted = %q\nwant     %q", in, want)
	}
	if naturalLess("loop01", "loop1") == naturalLess("loop1", "loop01") {
		t.Fatal("loop01 and loop1 must still have a strict order")
	}
}
