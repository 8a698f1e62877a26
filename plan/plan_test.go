package plan

import (
	"fmt"
	"testing"

	"github.com/iosched/iosched/policy"
	"github.com/iosched/iosched/sysfs"
)

func str(s string) *string { return &s }

func mqDisk() *sysfs.Device {
	return &sysfs.Device{
		Name: "vda", Class: sysfs.ClassVirtio, HWQueues: 1,
		Scheduler: str("mq-deadline"), Schedulers: []string{"none", "mq-deadline", "kyber"},
		Tunables: map[string]string{"read_ahead_kb": "128", "nr_requests": "256", "wbt_lat_usec": "75000"},
		IOSched:  map[string]string{"fifo_batch": "16", "read_expire": "500"},
	}
}

func bioDisk() *sysfs.Device {
	return &sysfs.Device{Name: "zram0", Class: sysfs.ClassZRAM, Schedulers: []string{},
		Tunables: map[string]string{"read_ahead_kb": "128"}, IOSched: map[string]string{}}
}

func set(attr, rule string, values ...string) policy.Setting {
	return policy.Setting{Attribute: attr, Values: values, Rule: rule}
}

func TestFor(t *testing.T) {
	unreadable := mqDisk()
	unreadable.Scheduler = nil
	tests := []struct {
		name     string
		dev      *sysfs.Device
		settings []policy.Setting
		changes  string
		skipped  string
	}{
		{
			name:     "in place: nothing",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "r", "mq-deadline"), set("read_ahead_kb", "r", "128"), set("iosched/fifo_batch", "r", "16")},
			changes:  "[]", skipped: "[]",
		},
		{
			name: "write order: scheduler, iosched, nr_requests, rest",
			dev:  mqDisk(),
			settings: []policy.Setting{
				set("read_ahead_kb", "b", "4096"), set("nr_requests", "b", "64"),
				set("iosched/fifo_batch", "b", "8"), set("scheduler", "a", "kyber"),
			},
			// After a switch the new scheduler's parameters are unknown.
			changes: "[{scheduler mq-deadline kyber a} {iosched/fifo_batch  8 b} {nr_requests 256 64 b} {read_ahead_kb 128 4096 b}]",
			skipped: "[]",
		},
		{
			name:     "first offered candidate wins",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "r", "bfq", "none", "mq-deadline")},
			changes:  "[{scheduler mq-deadline none r}]", skipped: "[]",
		},
		{
			name:     "nothing offered",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "r", "bfq")},
			changes:  "[]", skipped: "[{scheduler bfq not offered (none mq-deadline kyber) r}]",
		},
		{
			name:     "none has no parameters",
			dev:      mqDisk(),
			settings: []policy.Setting{set("scheduler", "r", "none"), set("iosched/fifo_batch", "r", "8")},
			changes:  "[{scheduler mq-deadline none r}]", skipped: "[{iosched/fifo_batch scheduler none has no parameters r}]",
		},
		{
			name:     "unknown parameter of the current scheduler",
			dev:      mqDisk(),
			settings: []policy.Setting{set("iosched/slice_idle", "r", "0")},
			changes:  "[]", skipped: "[{iosched/slice_idle not a parameter of mq-deadline r}]",
		},
		{
			name:     "bio-based disk",
			dev:      bioDisk(),
			settings: []policy.Setting{set("scheduler", "r", "none"), set("nr_requests", "r", "64"), set("iosched/fifo_batch", "r", "8"), set("read_ahead_kb", "r", "256")},
			changes:  "[{read_ahead_kb 128 256 r}]",
			skipped:  "[{scheduler no scheduler on a bio-based disk r} {iosched/fifo_batch no scheduler on a bio-based disk r} {nr_requests no scheduler on a bio-based disk r}]",
		},
		{
			name:     "tunable the kernel does not show",
			dev:      mqDisk(),
			settings: []policy.Setting{set("io_timeout", "r", "30000")},
			changes:  "[]", skipped: "[{io_timeout the kernel does not offer it on this disk r}]",
		},
		{
			name:     "unreadable scheduler is not bio-based",
			dev:      unreadable,
			settings: []policy.Setting{set("scheduler", "r", "none")},
			changes:  "[]", skipped: "[{scheduler the current scheduler could not be read (see errors) r}]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := For(tt.dev, policy.Evaluation{Matched: []string{"r"}, Settings: tt.settings})
			if got := fmt.Sprint(p.Changes); got != tt.changes {
				t.Errorf("changes\n got %s\nwant %s", got, tt.changes)
			}
			if got := fmt.Sprint(p.Skipped); got != tt.skipped {
				t.Errorf("skipped\n got %s\nwant %s", got, tt.skipped)
			}
			if p.Empty() != (len(p.Changes) == 0) {
				t.Error("Empty disagrees with Changes")
			}
		})
	}
}
