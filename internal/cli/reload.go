package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/paths"
	"github.com/iosched/iosched/internal/statefile"
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

Each reload leaves a request in RUNTIME-DIR/reload-requests and waits for the
daemon's answer to that request: reloads run at the same time each get the
result of a policy read after they asked. The signal goes only to the process
the state file names, once its start time and executable show it is that
daemon.

Exit status: 0 reloaded; 1 refused, or no answer within --timeout; 3 no daemon
is running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := runningState(runtimeDir)
			if err != nil {
				return err
			}
			pid := st.PID
			id, err := requestReload(runtimeDir)
			if err != nil {
				return err
			}
			defer os.Remove(filepath.Join(statefile.ReloadRequestDir(runtimeDir), id)) // when not taken
			// Checked again just before signalling: the pid must
			// still be the daemon's.
			if err := statefile.Verify(st.PID, st.ProcStart, st.Exe); err != nil {
				return &ExitError{Code: 3, Msg: fmt.Sprintf("%s (pid %d: %v)", statefile.ErrNotRunning, pid, err)}
			}
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				return fmt.Errorf("signalling the daemon (pid %d): %w", pid, err)
			}
			deadline := time.Now().Add(timeout)
			for {
				reloadPoll()
				st, err := statefile.Read(runtimeDir)
				if errors.Is(err, statefile.ErrNotRunning) {
					return &ExitError{Code: 3, Msg: "the daemon exited during the reload: " + err.Error()}
				}
				if r := answer(st, id); err == nil && r != nil && r.Done {
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
	cmd.Flags().StringVar(&runtimeDir, "runtime-dir", paths.Default.Runtime, "the daemon's runtime directory")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the re-plan")
	return cmd
}

// reloadPoll waits before reload reads the state file again; tests step
// it to know what reload has read.
var reloadPoll = func() { time.Sleep(50 * time.Millisecond) }

// requestReload leaves a request for the next reload to answer, and returns
// its id.
func requestReload(runtimeDir string) (string, error) {
	dir := statefile.ReloadRequestDir(runtimeDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("reload request: %w", err)
	}
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(dir, id), nil, 0o644); err != nil {
		return "", fmt.Errorf("reload request: %w", err)
	}
	return id, nil
}

// answer is the reload that took request id, nil when none has yet.
func answer(st *statefile.State, id string) *statefile.Reload {
	if st == nil {
		return nil
	}
	for i := range st.Reloads {
		if slices.Contains(st.Reloads[i].Requests, id) {
			return &st.Reloads[i]
		}
	}
	return nil
}
