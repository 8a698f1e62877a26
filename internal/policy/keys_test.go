package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/sysfs"
)

// matchKeySamples holds a valid value of every match key, in TOML. A key
// added to matchKeys without one fails TestMatchKeyTable.
var matchKeySamples = map[string]string{
	"class":      `"nvme"`,
	"name":       `"sd*"`,
	"driver":     `"sd"`,
	"transport":  `"ahci"`,
	"rotational": `true`,
	"removable":  `false`,
	"nowait":     `true`,
	"hw_queues":  `{ min = 2 }`,
	"size":       `{ min = "1GiB" }`,
	"model":      `"^QEMU"`,
	"vendor":     `"ATA"`,
	"serial":     `"Z"`,
	"property":   `{ ID_BUS = "ata" }`,
}

// Walks the match-key table: every key parses in match and in except, and
// what is derived from the table (the valid keys an error lists, where a
// misplaced key belongs, Needs, UsesNoWait, the manual's entries) agrees
// with it.
func TestMatchKeyTable(t *testing.T) {
	t.Parallel()
	names := matchKeyNames()
	if got := validKeysListed(t, "[[rule]]\nname = \"r\"\n[rule.match]\nzzzzzz = 1\n"); !slices.Equal(got, names) {
		t.Errorf("an unknown match key's error lists %v, the table %v", got, names)
	}
	docs := MatchKeyDocs()
	for i, k := range matchKeys() {
		if slices.Index(names, k.name) != i || lookupMatchKey(k.name) == nil || lookupMatchKey(k.name).name != k.name {
			t.Errorf("%s: listed twice, or not found", k.name)
		}
		if k.parse == nil || k.syntax == "" || k.doc == "" || docs[i].Key != k.name || docs[i].Doc != k.doc {
			t.Errorf("%s: an entry needs a parser, a syntax and a doc", k.name)
		}
		if belongsIn(k.name) != "[rule.match] or [rule.except]" && !contains(ruleKeys, k.name) {
			t.Errorf("%s: belongsIn says %q", k.name, belongsIn(k.name))
		}
		sample, ok := matchKeySamples[k.name]
		if !ok {
			t.Errorf("%s: no sample value in matchKeySamples", k.name)
			continue
		}
		for _, table := range []string{"match", "except"} {
			p := mustParse(t, fmt.Sprintf("[[rule]]\nname = \"r\"\n[rule.%s]\n%s = %s\n", table, k.name, sample))
			if got := p.Needs(); got != k.facts {
				t.Errorf("%s in %s: Needs() = %b, the table says %b", k.name, table, got, k.facts)
			}
			if got := p.UsesNoWait(); got != k.nodeTest {
				t.Errorf("%s in %s: UsesNoWait() = %t, the table says %t", k.name, table, got, k.nodeTest)
			}
			cs := p.Rules[0].match
			if table == "except" {
				cs = p.Rules[0].except[0]
			}
			if len(cs) != 1 || cs[0].from.name != k.name || !strings.HasPrefix(cs[0].key, k.name) {
				t.Errorf("%s in %s: compiled to %+v", k.name, table, cs)
			}
		}
	}
}

// Walks the table of settable attributes (sysfs.Attributes) from the
// policy's side: every tunable and the scheduler is a [rule.set] key, with
// its range enforced; a refused one is an error that says why; every
// mainline parameter is a [rule.set.iosched] key of its scheduler; and
// Needs asks for what each one needs read.
func TestSettableAttributeTable(t *testing.T) {
	t.Parallel()
	keys := setKeys()
	if got := validKeysListed(t, "[[rule]]\nname = \"r\"\n[rule.set]\nzzzzzz = 1\n"); !slices.Equal(got, keys) {
		t.Errorf("an unknown set key's error lists %v, setKeys %v", got, keys)
	}
	for _, spec := range sysfs.Attributes() {
		a := spec.Attr
		var doc string
		switch spec.Kind {
		case sysfs.KindScheduler:
			doc = fmt.Sprintf("[rule.set]\n%s = \"none\"\n", a)
		case sysfs.KindTunable:
			doc = fmt.Sprintf("[rule.set]\n%s = %d\n", a, spec.Range.Min)
		case sysfs.KindParam:
			doc = fmt.Sprintf("[rule.set]\nscheduler = %q\n[rule.set.iosched]\n%s = %d\n", spec.Scheduler, a.Param(), spec.Range.Max)
		}
		src := "[[rule]]\nname = \"r\"\n" + doc
		p, err := Parse(File{Name: "p.toml", Data: []byte(src)})
		if spec.Refused != "" {
			if err == nil || !strings.Contains(err.Error(), spec.Refused) {
				t.Errorf("%s: refused, yet %v", a, err)
			}
			if slices.Contains(keys, string(a)) {
				t.Errorf("%s: refused, yet a valid key", a)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s:\n%s\n%v", a, src, err)
			continue
		}
		if spec.Kind != sysfs.KindParam && !slices.Contains(keys, string(a)) {
			t.Errorf("%s: not in setKeys %v", a, keys)
		}
		if got := p.Needs(); got&a.Facts() != a.Facts() {
			t.Errorf("%s: Needs() = %b lacks %b", a, got, a.Facts())
		}
		if !slices.ContainsFunc(p.Rules[0].Settings(), func(s Setting) bool { return s.Attribute == string(a) }) {
			t.Errorf("%s: not among the settings %+v", a, p.Rules[0].Settings())
		}
		// Just outside the range is refused.
		if spec.Kind == sysfs.KindTunable && spec.Range.Min > 0 {
			bad := fmt.Sprintf("[[rule]]\nname = \"r\"\n[rule.set]\n%s = %d\n", a, spec.Range.Min-1)
			if _, err := Parse(File{Name: "p.toml", Data: []byte(bad)}); err == nil {
				t.Errorf("%s = %d accepted, below the range", a, spec.Range.Min-1)
			}
		}
	}
}

// validKeysListed is the "(valid: ...)" list of the one error doc has.
func validKeysListed(t *testing.T, doc string) []string {
	t.Helper()
	_, err := Parse(File{Name: "p.toml", Data: []byte(doc)})
	if err == nil {
		t.Fatalf("no error for\n%s", doc)
	}
	_, list, ok := strings.Cut(err.Error(), "(valid: ")
	if !ok {
		t.Fatalf("the error lists no valid keys: %v", err)
	}
	list, _, _ = strings.Cut(list, ")")
	return strings.Split(list, ", ")
}

// io_poll is refused at validation, with the reason.
func TestIOPollRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse(File{Name: "p.toml", Data: []byte("[[rule]]\nname = \"r\"\n[rule.set]\nio_poll = 1\n")})
	if err == nil {
		t.Fatal("io_poll = 1 accepted")
	}
	msg := err.Error()
	for _, want := range []string{"p.toml:4", "io_poll cannot be set", "EINVAL", "ignores writes", "poll_queues"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
}
