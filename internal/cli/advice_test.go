package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// The advice fits who runs iosched and what refused: "run as root" only
// where root would help, never for EPERM (a device cgroup or a security
// module refuses root too).
func TestAdvice(t *testing.T) {
	t.Parallel()
	nodeRefused := func(errno error) error {
		return fmt.Errorf("probe: %w", &probe.Refusal{Device: "loop7", Reason: "open /dev/loop7 read-only: " + errno.Error(), Err: errno})
	}
	tests := []struct {
		name string
		err  error
		euid int
		want string // "" for no advice; else a phrase it must hold
		not  string // a phrase it must not hold
	}{
		{"EACCES as a user", nodeRefused(unix.EACCES), 1000, "run as root", ""},
		{"EACCES as root", nodeRefused(unix.EACCES), 0, "security module", "run as root"},
		{"EPERM as a user", nodeRefused(unix.EPERM), 1000, "device cgroup", "run as root"},
		{"EPERM as root", nodeRefused(unix.EPERM), 0, "device cgroup", "run as root"},
		{"node missing", &probe.Refusal{Device: "loop7", Reason: "the device node /dev/loop7 is missing"}, 1000, "", ""},
		{"EACCES elsewhere", fmt.Errorf("write queue/scheduler: %w", unix.EACCES), 1000, "", ""},
		{"disk busy", &probe.Refusal{Device: "loop7", Reason: "the disk is busy", Busy: true, Err: probe.ErrOthersIO}, 0, "--force probes it anyway", ""},
		{"disk locked", &probe.Refusal{Device: "loop7", Reason: "another probe of loop7 is running", Busy: true}, 0, "", ""},
		{"sysfs one level too high", fmt.Errorf("list: %w", &sysfs.NestedRootError{Root: "cap", Tree: "cap/sys"}), 0, "pass --sysfs cap/sys", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := advice(tt.err, tt.euid)
			switch {
			case tt.want == "" && got != "":
				t.Errorf("advice = %q, want none", got)
			case !strings.Contains(got, tt.want):
				t.Errorf("advice = %q, want it to say %q", got, tt.want)
			case tt.not != "" && strings.Contains(got, tt.not):
				t.Errorf("advice = %q, must not say %q", got, tt.not)
			}
		})
	}
}

// withAdvice keeps the error's message and chain, and adds the advice after.
func TestWithAdvice(t *testing.T) {
	t.Parallel()
	ref := &probe.Refusal{Device: "loop7", Reason: "the disk is busy", Busy: true, Err: probe.ErrOthersIO}
	err := withAdvice(ref)
	if want := "loop7: probe refused: the disk is busy: --force probes it anyway"; err.Error() != want {
		t.Errorf("withAdvice = %q, want %q", err, want)
	}
	if !errors.Is(err, probe.ErrOthersIO) || !probe.IsBusy(err) {
		t.Errorf("withAdvice(%v) lost the chain", ref)
	}
	plain := errors.New("read /sys/block/vda/queue/scheduler: no such device")
	if got := withAdvice(plain); got != plain {
		t.Errorf("withAdvice(%v) = %v, want it unchanged", plain, got)
	}
	if withAdvice(nil) != nil {
		t.Error("withAdvice(nil) != nil")
	}
}
