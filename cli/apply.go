package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newApplyCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "apply", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("apply: not built yet") }}
}
