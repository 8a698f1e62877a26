package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newStatusCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "status", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("status: not built yet") }}
}
