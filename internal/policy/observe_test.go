package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

func TestParseObserve(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "all"
observe = "5s"

[[rule]]
name = "virtio"
match.class = "virtio"
observe = "30s"

[[rule]]
name = "nvme set"
match.class = "nvme"
set.scheduler = "none"
`
	p, err := Parse(File{Name: "p.toml", Data: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Rules[0].Observe(); got != 5*time.Second {
		t.Errorf("rule 1 observe = %v, want 5s", got)
	}
	if got := p.Rules[2].Observe(); got != 0 {
		t.Errorf("a rule without observe = %v, want 0", got)
	}
	for _, c := range []struct {
		d    *sysfs.Device
		want time.Duration
		rule string
	}{
		{&sysfs.Device{Name: "vda", Class: sysfs.ClassVirtio}, 30 * time.Second, "virtio"},
		// A later matching rule without the key leaves the earlier's.
		{&sysfs.Device{Name: "nvme0n1", Class: sysfs.ClassNVMe}, 5 * time.Second, "all"},
	} {
		if got, rule := p.ObserveFor(c.d); got != c.want || rule != c.rule {
			t.Errorf("ObserveFor(%s) = %v, %q; want %v, %q", c.d.Name, got, rule, c.want, c.rule)
		}
	}

	none, err := Parse(File{Name: "q.toml", Data: []byte("[[rule]]\nname = \"x\"\nset.scheduler = \"none\"\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got, rule := none.ObserveFor(&sysfs.Device{Name: "vda", Class: sysfs.ClassVirtio}); got != 0 || rule != "" {
		t.Errorf("ObserveFor with no observing rule = %v, %q; want nothing", got, rule)
	}
}

func TestParseObserveErrors(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "x"
observe = "5ms"

[[rule]]
name = "y"
observe = 5

[[rule]]
name = "z"
observe = "often"

[[rule]]
name = "w"
observe = "1h"

[[rule]]
name = "v"
observ = "5s"
`
	_, err := Parse(File{Name: "p.toml", Data: []byte(src)})
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`p.toml:3:1: rule 1 "x": observe: 5ms is outside 100ms..10m0s`,
		`p.toml:7:1: rule 2 "y": observe: want a string, not an integer`,
		`p.toml:11:1: rule 3 "z": observe: "often" is not a duration: want a number with a unit, such as "5s"`,
		`p.toml:15:1: rule 4 "w": observe: 1h0m0s is outside 100ms..10m0s`,
		`p.toml:19:1: rule 5 "v": observ: unknown key; did you mean "observe"?`,
	}
	got := strings.Split(err.Error(), "\n")
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w {
				found = true
			}
		}
		if !found {
			t.Errorf("missing error %q in:\n%s", w, err)
		}
	}
}

// TestObserveNeedsIdentity: a disk read for a policy whose only rule
// observes (matching by name, setting nothing) has the hardware key a
// probe gives it, read with every fact: the metrics' key must be the one
// probe results are remembered under, or the fleet cannot join them.
func TestObserveNeedsIdentity(t *testing.T) {
	t.Parallel()
	p, err := Parse(File{Name: "p.toml", Data: []byte("[[rule]]\nname = \"watch\"\nmatch.name = \"nvme0n1\"\nobserve = \"5s\"\n")})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sysfs.NewFS("../../testdata/sysfs/cloud")
	if err != nil {
		t.Fatal(err)
	}
	part, err := fs.DeviceFacts("nvme0n1", p.Needs())
	if err != nil {
		t.Fatal(err)
	}
	full, err := fs.Device("nvme0n1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := probe.KeyOf(fs, part), probe.KeyOf(fs, full); got != want || want.Model == "" || want.SizeBytes == 0 || want.HWQueues < 1 {
		t.Errorf("key read with Needs() = %v, with every fact %v", got, want)
	}
	if part.Rotational == nil {
		t.Error("rotational not read with Needs()")
	}
}
