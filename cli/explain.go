package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newExplainCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "explain", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("explain: not built yet") }}
}
