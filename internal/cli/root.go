package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/iosched/iosched/internal/disklock"
	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/sysfs"
)

// env is what every command shares: the global flags and the streams. It is
// passed to constructors, never kept in package variables, so tests can run
// commands in parallel.
type env struct {
	sysfsRoot string
	devDir    string
	policy    string
	// root is where udev rules and tuned profiles are read (--root).
	root  string
	flags *pflag.FlagSet // the global flags, to tell which were given
	// stateDir is where the daemon remembers probe results: the
	// --state-dir of plan, apply, explain and list.
	stateDir string
	// lockFile is the machine's lock of disks' settings (--lock-file,
	// hidden: one place per machine, which tests point elsewhere).
	lockFile string
	stdout   io.Writer
	stderr   io.Writer
}

func (e *env) fs() (sysfs.FS, error) { return sysfs.NewFS(e.sysfsRoot) }

// locks is the machine's lock of disks, as this command takes it.
func (e *env) locks() *disklock.Locks { return disklock.New(e.lockFile) }

// ExitError carries a process exit code; Msg, when set, is printed to stderr.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Version is the release, set at build time with
// -ldflags "-X github.com/iosched/iosched/cli.Version=v1.2.3"; otherwise the
// module version or VCS revision Go recorded, else "devel".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
	}
	return "devel"
}

// NewRoot builds the command tree writing to stdout and stderr.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	e := &env{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "iosched",
		Short: "Give every block device the I/O scheduler and queue settings that suit it",
		Long: `iosched classifies every block disk (virtio, nvme, ublk, ram, zram, loop,
scsi, dm, ...) and applies queue/scheduler and queue tunables to it from a TOML
policy: once (apply), as a dry run (plan), with reasons (explain), or as a
daemon that follows hot-plug uevents.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&e.sysfsRoot, "sysfs", paths.Default.Sys, "root of the sysfs tree to read and write")
	pf.StringVar(&e.devDir, "dev", "", "directory holding the block device nodes (default "+paths.Default.Dev+" when --sysfs is "+paths.Default.Sys+"; with another --sysfs, nodes are opened only in the --dev given)")
	pf.StringVar(&e.root, "root", "/", "root of the tree whose udev rules and tuned profile may undo the policy (read with a --sysfs other than /sys only when given)")
	e.flags = pf
	pf.StringVar(&e.lockFile, "lock-file", paths.Default.DiskLock, "the machine's lock of disks' settings, shared by the daemon, apply and probes (for tests)")
	if err := pf.MarkHidden("lock-file"); err != nil {
		panic(err) // the flag is defined just above
	}
	pf.StringVar(&e.policy, "policy", "", "policy file or directory of *.toml files (default /etc/iosched/policy.toml and /etc/iosched/policy.d/, else the embedded default)")

	root.AddCommand(
		newListCmd(e),
		newPlanCmd(e),
		newApplyCmd(e),
		newExplainCmd(e),
		newCheckCmd(e),
		newDefaultPolicyCmd(e),
		newDaemonCmd(e),
		newStatusCmd(e),
		newReloadCmd(e),
		newProbeCmd(e),
		newAdviseCmd(e),
		newFleetCmd(e),
	)
	return root
}

// Main runs iosched with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintln(stderr, "iosched:", ee.Msg)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "iosched:", printableLines(withAdvice(err).Error()))
	return 1
}

// Run is Main for the real process.
func Run() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }
