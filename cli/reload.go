package cli

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/daemon"
)

func newReloadCmd(e *env) *cobra.Command {
	var (
		runtimeDir string
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make the running daemon re-read its policy, and wait until every disk is re-planned",
		Long: `iosched reload sends the running daemon SIGHUP and waits until it has taken
the policy and re-planned every disk under it, or refused it. An invalid
policy prints its errors and exits 1: the daemon keeps the previous policy.
It is the unit's ExecReload=, so that "systemctl reload iosched" returns once
the reload is done and fails when the policy is refused (a bare kill -HUP
returns at once, whatever happens).

Exit status: 0 reloaded; 1 refused, or no answer within --timeout; 3 no daemon
is running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := runningState(runtimeDir)
			if err != nil {
				return err
			}
			pid, before := st.PID, 0
			if st.LastReload != nil {
				before = st.LastReload.Seq
			}
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				return fmt.Errorf("signalling the daemon (pid %d): %w", pid, err)
			}
			deadline := time.Now().Add(timeout)
			for {
				time.Sleep(50 * time.Millisecond)
				st, err := daemon.ReadState(runtimeDir)
				if errors.Is(err, daemon.ErrNotRunning) {
					return &ExitError{Code: 3, Msg: "the daemon exited during the reload: " + err.Error()}
				}
				if err == nil && st.LastReload != nil && st.LastReload.Seq > before && st.LastReload.Done {
					r := st.LastReload
					if !r.OK {
						for _, msg := range r.Errors {
							fmt.Fprintln(e.stderr, msg)
						}
						return &ExitError{Code: 1, Msg: "the policy was refused; the previous one stays in force"}
					}
					fmt.Fprintf(e.stdout, "reloaded %s; every disk re-planned\n", strings.Join(st.Policy.Sources, ", "))
					return nil
				}
				if time.Now().After(deadline) {
					return &ExitError{Code: 1, Msg: fmt.Sprintf("the daemon (pid %d) did not finish the reload within %s", pid, timeout)}
				}
			}
		},
	}
	cmd.Flags().StringVar(&runtimeDir, "runtime-dir", daemon.DefaultRuntimeDir, "the daemon's runtime directory")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the re-plan")
	return cmd
}
