package cli

import (
	"github.com/spf13/cobra"

	"github.com/iosched/iosched/internal/policy"
)

func newDefaultPolicyCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "default-policy",
		Short: "Print the policy embedded in the binary, to start a policy file from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := e.stdout.Write(policy.Embedded())
			return err
		},
	}
}
