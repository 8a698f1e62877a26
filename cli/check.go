package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newCheckCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "check", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("check: not built yet") }}
}
