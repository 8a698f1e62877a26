package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// PLACEHOLDER: replaced by the real command.
func newDefaultPolicyCmd(e *env) *cobra.Command {
	return &cobra.Command{Use: "default-policy", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("default-policy: not built yet") }}
}
