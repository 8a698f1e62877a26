package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

func str(s string) *string { return &s }

func mqDisk() *sysfs.Device {
	return &sysfs.Device{
		Name: "vda", Class: sysfs.ClassVirtio, HWQueues: intp(1),
		Scheduler: str("mq-deadline"), Schedulers: []string{"none", "mq-deadline", "kyber", "bfq"},
		Tunables: map[string]string{"read_ahead_kb": "128", "nr_requests": "256", "wbt_lat_usec": "75000"},
		IOSched:  map[string]string{"fifo_batch": "16", "read_expire": "500", "async_depth": "256"},
	}
}

func bioDisk() *sysfs.Device {
	return &sysfs.Device{Name: "zram0", Class: sysfs.ClassZRAM, Schedulers: []string{}, HWQueues: intp(0), BioBasedBy: "zram disks are bio-based",
		Tunables: map[string]string{"read_ahead_kb": "128"}, IOSched: map[string]string{}}
}

func set(attr string, values ...string) policy.Setting {
	return policy.Setting{Attribute: attr, Values: values, Rule: "r"}
}

// show renders changes as "attr: from -> to", with "(after X)" for a value
// to be read again after X, and skips as "attr: reason".
func show(p Plan) (changes, skipped string) {
	var c, s []string
	for _, ch := range p.Changes {
		from := ch.From
		if ch.After != "" {
			from = "(after " + ch.After + ")"
		}
		c = append(c, fmt.Sprintf("%s: %s -> %s", ch.Attribute, from, ch.To))
	}
	for _, sk := range p.Skipped {
		s = append(s, sk.Attribute+": "+sk.Reason)
	}
	return strings.Join(c, "; "), strings.Join(s, "; ")
}

func TestFor(t *testing.T) {
	t.Parallel()
	unreadable := mqDisk()
	unreadable.Scheduler = nil
	tests := []struct {
		name     string
		dev      *sysfs.Device
		settings []policy.Setting
		changes  string
		skipped  string
		errors   int
	}{
		{
			name:     "in place: nothing",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "mq-deadline"), set("read_ahead_kb", "128"), set("iosched/fifo_batch", "16")},
		},
		{
			name: "write order: scheduler, nr_requests, iosched, rest; all a switch resets read again",
			dev:  mqDisk(),
			settings: []policy.Setting{
				set("read_ahead_kb", "4096"), set("iosched/read_lat_nsec", "1000"),
				set("nr_requests", "64"), set("scheduler", "kyber"),
			},
			changes: "scheduler: mq-deadline -> kyber; nr_requests: (after scheduler) -> 64; iosched/read_lat_nsec: (after scheduler) -> 1000; read_ahead_kb: 128 -> 4096",
		},
		{
			name:     "a switch resets nr_requests even when the snapshot shows it in place",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "none"), set("nr_requests", "256"), set("wbt_lat_usec", "75000"), set("read_ahead_kb", "128")},
			changes:  "scheduler: mq-deadline -> none; nr_requests: (after scheduler) -> 256; wbt_lat_usec: (after scheduler) -> 75000",
		},
		{
			name:     "nr_requests resets mq-deadline's async_depth",
			dev:      mqDisk(),
			settings: []policy.Setting{set("nr_requests", "64"), set("iosched/async_depth", "256"), set("iosched/fifo_batch", "16")},
			changes:  "nr_requests: 256 -> 64; iosched/async_depth: (after nr_requests) -> 256",
		},
		{
			name:     "first offered candidate wins",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "bfq-ng", "none", "mq-deadline")},
			changes:  "scheduler: mq-deadline -> none",
		},
		{
			name:     "nothing offered",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "bfq-ng")},
			skipped:  "scheduler: bfq-ng not offered: the disk offers none mq-deadline kyber bfq",
		},
		{
			name:     "none has no parameters",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "none"), set("iosched/fifo_batch", "8")},
			changes:  "scheduler: mq-deadline -> none",
			skipped:  "iosched/fifo_batch: scheduler none has no parameters",
		},
		{
			name:     "a parameter of another scheduler than the one chosen",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "bfq"), set("iosched/fifo_batch", "8"), set("iosched/slice_idle", "0")},
			changes:  "scheduler: mq-deadline -> bfq; iosched/slice_idle: (after scheduler) -> 0",
			skipped:  "iosched/fifo_batch: fifo_batch is not a parameter of bfq",
		},
		{
			name:     "a parameter the current scheduler lacks",
			dev:      mqDisk(),
			settings: []policy.Setting{set("iosched/slice_idle", "0")},
			skipped:  "iosched/slice_idle: slice_idle is not a parameter of mq-deadline",
		},
		{
			name:     "bio-based disk",
			dev:      bioDisk(),
			settings: []policy.Setting{set("scheduler", "none"), set("nr_requests", "64"), set("iosched/fifo_batch", "8"), set("read_ahead_kb", "256")},
			changes:  "read_ahead_kb: 128 -> 256",
			skipped:  "scheduler: no scheduler on a bio-based disk; nr_requests: no scheduler on a bio-based disk; iosched/fifo_batch: no scheduler on a bio-based disk",
		},
		{
			name:     "tunable the kernel does not show",
			dev:      mqDisk(),
			settings: []policy.Setting{set("io_timeout", "30000")},
			skipped:  "io_timeout: the kernel does not offer it on this disk",
		},
		{
			name:     "unreadable scheduler is an error, not bio-based",
			dev:      unreadable,
			settings: []policy.Setting{set("scheduler", "none"), set("iosched/fifo_batch", "8"), set("read_ahead_kb", "256")},
			changes:  "read_ahead_kb: 128 -> 256",
			errors:   2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := For(tt.dev, policy.Evaluation{Matched: []string{"r"}, Settings: tt.settings})
			changes, skipped := show(p)
			if changes != tt.changes {
				t.Errorf("changes\n got %s\nwant %s", changes, tt.changes)
			}
			if skipped != tt.skipped {
				t.Errorf("skipped\n got %s\nwant %s", skipped, tt.skipped)
			}
			if len(p.Errors) != tt.errors {
				t.Errorf("errors %q, want %d", p.Errors, tt.errors)
			}
			if p.Empty() != (len(p.Changes) == 0) {
				t.Error("Empty disagrees with Changes")
			}
		})
	}
}

func TestWarningsCarryReadProblems(t *testing.T) {
	t.Parallel()
	d := mqDisk()
	d.Errors = []string{"queue/rotational: not 0 or 1: \"banana\""}
	if p := For(d, policy.Evaluation{}); len(p.Warnings) != 1 || len(p.Errors) != 0 {
		t.Errorf("warnings %q errors %q", p.Warnings, p.Errors)
	}
}

func intp(n int) *int { return &n }
