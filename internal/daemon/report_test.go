package daemon

import (
	"reflect"
	"testing"

	"github.com/iosched/iosched/internal/statefile"

	"github.com/iosched/iosched/internal/apply"
	"github.com/iosched/iosched/internal/plan"
	"github.com/iosched/iosched/internal/policy"
	"github.com/iosched/iosched/internal/sysfs"
)

// The state shows, for each setting, the value on the disk and, when that
// is not it, the value the plan chose: for the scheduler the first
// candidate the disk offers, not the first candidate.
func TestAppliedWantsWhatThePlanChose(t *testing.T) {
	t.Parallel()
	ev := policy.Evaluation{Matched: []string{"r"}, Settings: []policy.Setting{
		{Attribute: "scheduler", Values: []string{"bfq", "mq-deadline"}, Rule: "r"},
		{Attribute: "nr_requests", Values: []string{"64"}, Rule: "r"},
		{Attribute: "wbt_lat_usec", Values: []string{"0"}, Rule: "r"}, // not offered: skipped
	}}
	disk := func(sched, nr string) *sysfs.Device {
		return &sysfs.Device{Name: "loop20000", Class: "loop", Scheduler: &sched, Schedulers: []string{"none", "mq-deadline", "kyber"},
			HWQueues: intp(1), Tunables: map[string]string{"nr_requests": nr}, IOSched: map[string]string{}}
	}
	tests := []struct {
		name   string
		dev    *sysfs.Device
		failed string // the attribute whose write fails; the others are written
		want   []statefile.Applied
	}{
		{"in place", disk("mq-deadline", "64"), "", []statefile.Applied{
			{Attribute: "scheduler", Value: "mq-deadline", Rule: "r"},
			{Attribute: "nr_requests", Value: "64", Rule: "r"},
		}},
		{"written", disk("none", "128"), "", []statefile.Applied{
			{Attribute: "scheduler", Value: "mq-deadline", Rule: "r"},
			{Attribute: "nr_requests", Value: "64", Rule: "r"},
		}},
		{"scheduler write failed", disk("none", "128"), "scheduler", []statefile.Applied{
			{Attribute: "scheduler", Value: "none", Want: "mq-deadline", Rule: "r"},
			{Attribute: "nr_requests", Value: "64", Rule: "r"},
		}},
	}
	for _, tt := range tests {
		p := plan.For(tt.dev, ev)
		var res apply.Result
		for _, c := range p.Changes {
			o := apply.Outcome{Change: c, Before: Current(tt.dev, c.Attribute), Status: apply.Written, Got: c.To}
			if c.Attribute == tt.failed {
				o.Status, o.Got = apply.Failed, ""
			}
			res.Outcomes = append(res.Outcomes, o)
		}
		settle(tt.dev, res)
		if got := Applied(tt.dev, ev, p); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: settings\n%+v\nwant\n%+v", tt.name, got, tt.want)
		}
	}
}

func intp(n int) *int { return &n }
