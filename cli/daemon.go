package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newDaemonCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "daemon", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("daemon: not built yet") }}
}
