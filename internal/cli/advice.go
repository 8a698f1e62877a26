package cli

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/probe"
	"github.com/iosched/iosched/internal/sysfs"
)

// The library packages say what failed and where ("open /dev/loop7
// read-only: permission denied"); which flag or privilege would help is
// the CLI's to say, since only it knows the flags and who runs it.

// advisedError is an error with what a person can do about it.
type advisedError struct {
	err    error
	advice string
}

func (a *advisedError) Error() string { return a.err.Error() + ": " + a.advice }
func (a *advisedError) Unwrap() error { return a.err }

// withAdvice is err with advice for the person running iosched, when there
// is any to give.
func withAdvice(err error) error {
	if err == nil {
		return nil
	}
	if s := advice(err, unix.Geteuid()); s != "" {
		return &advisedError{err: err, advice: s}
	}
	return err
}

// advice is what the person running iosched as euid can do about err, or "".
func advice(err error, euid int) string {
	var nested *sysfs.NestedRootError
	if errors.As(err, &nested) {
		return "pass --sysfs " + nested.Tree
	}
	if errors.Is(err, probe.ErrOthersIO) {
		return "--force probes it anyway"
	}
	var ref *probe.Refusal
	if !errors.As(err, &ref) || ref.Err == nil {
		return ""
	}
	// Opening a disk's node. Its mode bits answer EACCES, which root does
	// not get; a device cgroup (the kernel's devcgroup_check_permission) or
	// a security module answers EPERM, or EACCES (SELinux, AppArmor) to
	// root too: running as root does not help against those.
	switch {
	case errors.Is(ref.Err, unix.EACCES) && euid != 0:
		return "run as root"
	case errors.Is(ref.Err, unix.EPERM):
		return "not the node's permissions: a device cgroup or a security module (SELinux, AppArmor) forbids this process to open it, as root too"
	case errors.Is(ref.Err, unix.EACCES):
		return "refused to root: a security module (SELinux, AppArmor) or a nodev mount forbids opening it"
	}
	return ""
}
