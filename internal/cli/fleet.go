package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
)

// FleetProgram is the program that carries out `iosched fleet`
// (cmd/iosched-fleet): the command links Prometheus' HTTP client and
// net/http, which would add about 4.5 MB to the resident memory of every
// iosched process, the daemon's included, for a command the daemon never
// runs. Its manual page is generated from the program's own command
// (package fleetcli), not from this one.
const FleetProgram = "iosched-fleet"

func newFleetCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "fleet --prometheus URL [flags]",
		Short: "The fleet's table from Prometheus: per kind of disk, where busy time sits and which scheduler wins there",
		Long: `fleet runs ` + FleetProgram + ` (installed beside iosched, or found in PATH) with
the same arguments: see its --help, or iosched-fleet(1).`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			prog, err := fleetProgram()
			if err != nil {
				return &ExitError{Code: 1, Msg: "fleet: " + err.Error()}
			}
			c := exec.Command(prog, args...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, e.stdout, e.stderr
			err = c.Run()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				return &ExitError{Code: max(ee.ExitCode(), 1)}
			case err != nil:
				return &ExitError{Code: 1, Msg: fmt.Sprintf("fleet: %v", err)}
			}
			return nil
		},
	}
}

// fleetProgram finds FleetProgram beside this executable, else in PATH.
func fleetProgram() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), FleetProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(FleetProgram)
	if err != nil {
		return "", fmt.Errorf("%s is neither beside iosched nor in PATH (go install github.com/iosched/iosched/cmd/%s@latest; the packages install it)", FleetProgram, FleetProgram)
	}
	return p, nil
}
