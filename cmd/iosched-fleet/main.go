// Command iosched-fleet is `iosched fleet`, which iosched runs: the
// fleet's table from Prometheus. It is a program of its own so that
// iosched, the daemon, does not link Prometheus' HTTP client.
package main

import (
	"os"

	"github.com/iosched/iosched/internal/fleetcli"
)

func main() { os.Exit(fleetcli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
