package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newPlanCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "plan", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("plan: not built yet") }}
}
