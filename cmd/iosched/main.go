// Command iosched gives every block device the I/O scheduler and queue
// settings that suit it, from a TOML policy. See README.md.
package main

import "github.com/iosched/iosched/internal/cli"

func main() { cli.Run() }
