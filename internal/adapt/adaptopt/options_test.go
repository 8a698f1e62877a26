package adaptopt

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	t.Parallel()
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"seconds", func(o *Options) { o.Sample, o.Window, o.MinInterval = 100*time.Millisecond, 2*time.Second, 0 }, nil},
		{"short sample", func(o *Options) { o.Sample = 5 * time.Millisecond }, []string{"sample: 5ms is outside 100ms..10m0s"}},
		{"zero window", func(o *Options) { o.Window = 0 }, []string{"window: 0s is not a positive duration"}},
		{"sample = window", func(o *Options) { o.Window = o.Sample }, []string{
			"sample and window: the window (5s) is not longer than a sample (5s): want at least 3 samples a window"}},
		{"two samples", func(o *Options) { o.Window = 10 * time.Second }, []string{
			"sample and window: the window (10s) holds 2 samples of 5s: want at least 3, or one burst would decide"}},
		{"too many samples", func(o *Options) { o.Sample = time.Second; o.Window = 24 * time.Hour }, []string{
			"sample and window: the window (24h0m0s) holds 86400 samples of 1s: at most 2048 (a longer sample or a shorter window)"}},
		{"margin", func(o *Options) { o.Margin = 0 }, []string{"margin: 0% is outside 1%..50%"}},
		{"min_interval", func(o *Options) { o.MinInterval = -time.Second }, []string{"min_interval: -1s is outside 0s..168h0m0s"}},
		{"switches", func(o *Options) { o.MaxSwitchesPerDay = 0 }, []string{"max_switches_per_day: 0 is outside 1..96"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Default()
			tc.edit(&o)
			var got []string
			for _, p := range o.Problems() {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
