package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestPositions(t *testing.T) {
	t.Parallel()
	src := strings.Join([]string{
		`# comment with [[rule]] and key = 1`, // 1
		`top = "x" # trailing`,                // 2
		`[[rule]]`,                            // 3
		`name = """multi`,                     // 4
		`[[rule]]`,                            // 5: inside the string
		`x = 1"""`,                            // 6
		`  match.class = [ "a",`,              // 7
		`    # a comment in an array`,         // 8
		`    'b' ]`,                           // 9
		`[[rule]]`,                            // 10
		`"quoted key" = { min = 1, inner = { deep = [1, {x = 2}] } }`, // 11
		`[[rule.except]]`, // 12
		`"é" = { "ü" = 'naïve', k = 2 } # columns count characters`, // 13
		`[[rule.except]]`,             // 14
		`date = 1979-05-27 07:32:00Z`, // 15
		`after = true`,                // 16
		`[daemon]`,                    // 17
		"crlf = 1\r",                  // 18
		`next = 2`,                    // 19
	}, "\n")
	idx := positions([]byte(src))
	at := func(elems ...string) pos { return idx[pathKey(elems)] }
	tests := []struct {
		path []string
		want pos
	}{
		{[]string{"top"}, pos{2, 1}},
		{[]string{"rule", "[0]"}, pos{3, 1}},
		{[]string{"rule", "[0]", "name"}, pos{4, 1}},
		{[]string{"rule", "[0]", "match"}, pos{7, 3}},
		{[]string{"rule", "[0]", "match", "class"}, pos{7, 3}},
		{[]string{"rule", "[0]", "match", "class", "[0]"}, pos{7, 19}},
		{[]string{"rule", "[0]", "match", "class", "[1]"}, pos{9, 5}},
		{[]string{"rule", "[1]"}, pos{10, 1}},
		{[]string{"rule", "[1]", "quoted key"}, pos{11, 1}},
		{[]string{"rule", "[1]", "quoted key", "min"}, pos{11, 18}},
		{[]string{"rule", "[1]", "quoted key", "inner", "deep", "[1]", "x"}, pos{11, 49}},
		{[]string{"rule", "[1]", "except", "[0]"}, pos{12, 1}},
		{[]string{"rule", "[1]", "except", "[0]", "é", "k"}, pos{13, 24}},
		{[]string{"rule", "[1]", "except", "[1]"}, pos{14, 1}},
		{[]string{"rule", "[1]", "except", "[1]", "date"}, pos{15, 1}},
		{[]string{"rule", "[1]", "except", "[1]", "after"}, pos{16, 1}},
		{[]string{"daemon"}, pos{17, 1}},
		{[]string{"daemon", "next"}, pos{19, 1}},
	}
	for _, tt := range tests {
		if got := at(tt.path...); got != tt.want {
			t.Errorf("%q at %v, want %v", tt.path, got, tt.want)
		}
	}
	if _, ok := idx[pathKey([]string{"rule", "[2]"})]; ok {
		t.Error("a [[rule]] inside a multi-line string was counted")
	}
	if got := at("rule", "[1]", "except", "[0]", "é"); got != (pos{13, 1}) {
		t.Errorf("non-ASCII key at %v", got)
	}
	// Text that is not TOML: the scanner stops there, keeping what it had.
	bad := positions([]byte("a = 1\n= oops\nb = 2\n"))
	if _, ok := bad["b"]; ok || bad["a"] != (pos{1, 1}) {
		t.Errorf("positions of invalid text = %v", bad)
	}
}

func TestPositionsCount(t *testing.T) {
	t.Parallel()
	src := "[[rule]]\nname = \"a\"\n[[rule]]\nname = \"b\"\n[rule.set]\nx = 1\n[[rule]]\n"
	idx := positions([]byte(src))
	var got []pos
	for _, p := range []string{"rule\x1f[0]", "rule\x1f[1]", "rule\x1f[1]\x1fset", "rule\x1f[1]\x1fset\x1fx", "rule\x1f[2]"} {
		got = append(got, idx[p])
	}
	want := []pos{{1, 1}, {3, 1}, {5, 1}, {6, 1}, {7, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if l, c := lineCol([]byte("ab\ncé\nx"), 6); l != 2 || c != 3 {
		t.Errorf("lineCol = %d:%d, want 2:3", l, c)
	}
}
