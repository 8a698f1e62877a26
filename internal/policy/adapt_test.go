package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/adapt/adaptopt"
	"github.com/iosched/iosched/internal/sysfs"
)

func TestParseAdapt(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "virtio: adaptive"
match.class = "virtio"
[rule.probe]
[rule.adapt]
sample = "500ms"
window = "5s"
margin = "12.5%"
min_interval = "0s"
max_switches_per_day = 24
guard = false

[[rule]]
name = "defaults"
[rule.probe]
[rule.adapt]
`
	p, err := Parse(File{Name: "p.toml", Data: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	want := &Adapt{adaptopt.Options{Sample: 500 * time.Millisecond, Window: 5 * time.Second, Margin: 0.125,
		MinInterval: 0, MaxSwitchesPerDay: 24, Guard: false}}
	if got := p.Rules[0].Adapt(); !reflect.DeepEqual(got, want) {
		t.Errorf("adapt = %+v, want %+v", got, want)
	}
	def := DefaultAdapt()
	if got := p.Rules[1].Adapt(); !reflect.DeepEqual(got, &def) {
		t.Errorf("empty [rule.adapt] = %+v, want the defaults %+v", got, def)
	}
	if def.Sample != 5*time.Second || def.Window != 10*time.Minute || def.Margin != 0.10 || def.MinInterval != time.Hour ||
		def.MaxSwitchesPerDay != 6 || !def.Guard {
		t.Errorf("defaults %+v are not the documented ones", def)
	}

	// The last matching rule's table is in force.
	vd := &sysfs.Device{Name: "vda", Class: sysfs.ClassVirtio}
	if got, rule := p.AdaptFor(vd); got == nil || rule != "defaults" || got.Window != 10*time.Minute {
		t.Errorf("AdaptFor(vda) = %+v, %q", got, rule)
	}
	p2, err := Parse(File{Name: "q.toml", Data: []byte("[[rule]]\nname = \"x\"\nmatch.class = \"nvme\"\nprobe = {}\nadapt = {}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p2.AdaptFor(vd); got != nil {
		t.Errorf("AdaptFor(vda) with an nvme-only rule = %+v", got)
	}
	if got := p2.Rules[0].Adapt(); got == nil {
		t.Error("an inline adapt = {} was not read")
	}
}

func TestParseAdaptErrors(t *testing.T) {
	t.Parallel()
	src := `[[rule]]
name = "x"
[rule.probe]
[rule.adapt]
sample = "5ms"
window = "10"
margin = 10
min_interval = "-1h"
max_switches_per_day = 0
guard = "yes"
windows = "10m"

[[rule]]
name = "y"
[rule.probe]
[rule.adapt]
sample = "1m"
window = "2m"
margin = "60%"
min_interval = "30d"

[[rule]]
name = "z"
[rule.probe]
[rule.adapt]
window = "1s"
margin = "ten"

[[rule]]
name = "w"
adapt = "on"
[rule.set]
guard = true

[[rule]]
name = "v"
[rule.probe]
[rule.adapt]
sample = "1s"
window = "1h"
max_switches_per_day = "6"
`
	want := []string{
		`p.toml:5:1: rule 1 "x": adapt.sample: 5ms is outside 100ms..10m0s`,
		`p.toml:6:1: rule 1 "x": adapt.window: "10" is not a duration: want a number with a unit, such as "5s" or "10m"`,
		`p.toml:7:1: rule 1 "x": adapt.margin: want a percentage as a string, such as "10%", not an integer`,
		`p.toml:8:1: rule 1 "x": adapt.min_interval: -1h is negative`,
		`p.toml:9:1: rule 1 "x": adapt.max_switches_per_day: 0 is outside 1..96`,
		`p.toml:10:1: rule 1 "x": adapt.guard: want true or false, not a string`,
		`p.toml:11:1: rule 1 "x": adapt.windows: unknown key; did you mean "window"?`,
		`p.toml:18:1: rule 2 "y": adapt.window: the window (2m0s) holds 2 samples of 1m0s: want at least 3, or one burst would decide`,
		`p.toml:19:1: rule 2 "y": adapt.margin: 60% is outside 1%..50%`,
		`p.toml:20:1: rule 2 "y": adapt.min_interval: "30d" is not a duration: want a number with a unit, such as "5s" or "10m"`,
		`p.toml:26:1: rule 3 "z": adapt.window: the window (1s) is not longer than a sample (5s): want at least 3 samples a window`,
		`p.toml:27:1: rule 3 "z": adapt.margin: "ten" is not a percentage: want a number and %, such as "5%"`,
		`p.toml:31:1: rule 4 "w": adapt: want a table ([rule.adapt]), not a string`,
		`p.toml:33:1: rule 4 "w": set.guard: unknown key here: "guard" belongs in [rule.adapt]`,
		`p.toml:40:1: rule 5 "v": adapt.window: the window (1h0m0s) holds 3600 samples of 1s: at most 2048 (a longer sample or a shorter window)`,
		`p.toml:41:1: rule 5 "v": adapt.max_switches_per_day: want an integer, not a string`,
	}
	got := errorLines(t, File{Name: "p.toml", Data: []byte(src)})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// An adaptive rule needs curves: its own [rule.probe], or seeded results
// named in [daemon] probe_results, which a later file may give.
func TestParseAdaptNeedsCurves(t *testing.T) {
	t.Parallel()
	rule := `[[rule]]
name = "a"
match.class = "virtio"
[rule.set]
scheduler = "none"
[rule.adapt]
window = "1m"
`
	got := errorLines(t, File{Name: "p.toml", Data: []byte(rule)})
	want := `p.toml:6:1: rule 1 "a": adapt: an adaptive rule reads its disks' probe curves, and none can come: add [rule.probe] to this rule, or name seeded results in [daemon] probe_results`
	if strings.Join(got, "\n") != want {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}

	// Sorted among the file's other errors, and before a later file's.
	got = errorLines(t, File{Name: "p.toml", Data: []byte(rule + "colour = 1\n")}, File{Name: "q.toml", Data: []byte("x = 1\n")})
	wantAll := []string{want, `p.toml:8:1: rule 1 "a": adapt.colour: unknown key (valid: sample, window, margin, min_interval, max_switches_per_day, guard)`,
		`q.toml:1:1: x: unknown key (valid: rule, daemon)`}
	if strings.Join(got, "\n") != strings.Join(wantAll, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantAll, "\n"))
	}

	// Seeded results in a later file are a source of curves.
	seeds := File{Name: "z.toml", Data: []byte("[daemon]\nprobe_results = [\"/etc/iosched/probes.d/*.json\"]\n")}
	if _, err := Parse(File{Name: "p.toml", Data: []byte(rule)}, seeds); err != nil {
		t.Errorf("with seeds: %v", err)
	}
	// Its own probe is the other.
	if _, err := Parse(File{Name: "p.toml", Data: []byte(rule + "[rule.probe]\n")}); err != nil {
		t.Errorf("with [rule.probe]: %v", err)
	}
}
