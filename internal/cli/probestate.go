package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/iosched/iosched/internal/pipeline"
	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/statefile"
	"github.com/iosched/iosched/internal/sysfs"
)

// This file shows what [rule.probe] and the remembered probe results mean
// for a disk, in plan, list and explain.

// rememberedFor is the newest result probes.json in stateDir holds for a
// disk like dev (read with every fact), nil when none. A record that fails
// probe.Record.Check is not one (the lookup plan and explain make says
// why).
func rememberedFor(fs sysfs.FS, stateDir string, dev *sysfs.Device) (*probe.Record, error) {
	recs, err := probe.OpenStore(stateDir, nil).Records()
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	key := probe.KeyOf(fs, dev)
	now := time.Now()
	var best *probe.Record
	for i := range recs {
		if recs[i].Key == key && recs[i].Check(now) == nil && (best == nil || recs[i].At.After(best.At)) {
			best = &recs[i]
		}
	}
	return best, nil
}

// recordLine is a remembered result in a line: winner, figures, when.
func recordLine(r *probe.Record) string {
	if r.Disturbed != "" {
		return fmt.Sprintf("%s (%s; remembered %s; disturbed: %s, not reused)", r.Winner, r.Provenance, r.At.Format(time.RFC3339), r.Disturbed)
	}
	return fmt.Sprintf("%s (%s; remembered %s)", r.Winner, r.Provenance, r.At.Format(time.RFC3339))
}

// probeNote is what the daemon does about the disk's scheduler under a
// [rule.probe]: use the remembered or seeded decision, or probe (pending),
// the rule's scheduler being the interim value. "" when no rule probes the
// disk.
func probeNote(a pipeline.Assessment) string {
	dec := a.Probe
	switch {
	case !dec.Probed():
		return ""
	case dec.Report != nil:
		rep := dec.Report
		return fmt.Sprintf("scheduler: probe decided %s (rule %q; %s; %s)", rep.Winner, dec.Rule, rep.Provenance, rep.From)
	}
	interim := "the disk's own " + *a.Device.Scheduler
	for _, s := range a.Eval.Settings {
		if s.Attribute == "scheduler" {
			interim = strings.Join(s.Values, " or ")
		}
	}
	return fmt.Sprintf("scheduler: probe pending (rule %q); interim %s", dec.Rule, interim)
}

// renderRemembered lists the disks with a remembered probe result, after
// list's table; nothing when none has one.
func renderRemembered(w io.Writer, fs sysfs.FS, stateDir string, devs []*sysfs.Device) {
	header := false
	for _, d := range devs {
		r, err := rememberedFor(fs, stateDir, d)
		if err != nil {
			fmt.Fprintf(w, "warning: probe results: %s\n", printableLines(err.Error()))
			return
		}
		if r == nil {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nprobe results (%s):\n", printable(probe.OpenStore(stateDir, nil).Path()))
			header = true
		}
		fmt.Fprintf(w, "  %s: %s\n", printable(d.Name), printable(recordLine(r)))
	}
}

// probeShown is explain's probe section.
type probeShown struct {
	// Decision is what the daemon does about a [rule.probe] (probeNote).
	Decision string `json:"decision,omitempty"`
	// Remembered is probes.json's newest result for a disk like this one.
	Remembered string `json:"remembered,omitempty"`
	Err        error  `json:"-"`
	Error      string `json:"error,omitempty"`
}

func (p *probeShown) orNil() *probeShown {
	if p.Err != nil {
		p.Error = p.Err.Error()
	}
	if p.Decision == "" && p.Remembered == "" && p.Error == "" {
		return nil
	}
	return p
}

func (p *probeShown) render(w io.Writer) {
	if p.orNil() == nil {
		return
	}
	fmt.Fprintln(w, "\nprobe:")
	if p.Decision != "" {
		fmt.Fprintf(w, "  %s\n", printable(p.Decision))
	}
	if p.Remembered != "" {
		fmt.Fprintf(w, "  remembered: %s\n", printable(p.Remembered))
	}
	if p.Error != "" {
		fmt.Fprintf(w, "  warning: %s\n", printableLines(p.Error))
	}
}

// probeStatus is a disk's probe in `iosched status`.
func probeStatus(p *statefile.ProbeState) string {
	interim := p.Interim
	if interim == "" {
		interim = "the disk's own"
	}
	switch p.Status {
	case "decided":
		return fmt.Sprintf("scheduler %s by probe (rule %q; %s; %s)", p.Winner, p.Rule, p.Provenance, p.From)
	case "pending", "running":
		s := fmt.Sprintf("probe %s (rule %q); interim scheduler %s", p.Status, p.Rule, interim)
		if p.Error != "" {
			s += "; last try: " + p.Error
		}
		return s
	case "budget":
		return fmt.Sprintf("probe not run: probe_budget spent (rule %q); interim scheduler %s", p.Rule, interim)
	default:
		return fmt.Sprintf("probe %s (rule %q): %s; interim scheduler %s", p.Status, p.Rule, p.Error, interim)
	}
}
