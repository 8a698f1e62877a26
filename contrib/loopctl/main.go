// Command loopctl creates and removes empty loop devices by number, through
// /dev/loop-control, to watch `iosched daemon` act on hot-plugged disks:
//
//	sudo go run ./contrib/loopctl add 7000 7001 7002
//	sudo go run ./contrib/loopctl remove 7000 7001 7002
//
// It refuses numbers below 1000, so it never touches the loop devices a
// machine already uses (loop0, loop1, ... as losetup -f hands them out).
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/iosched/iosched/internal/looptest"
)

func main() {
	if len(os.Args) < 3 || (os.Args[1] != "add" && os.Args[1] != "remove") {
		fmt.Fprintln(os.Stderr, "usage: loopctl add|remove N [N...]   (N >= 1000)")
		os.Exit(2)
	}
	failed := false
	for _, arg := range os.Args[2:] {
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1000 || n > 1<<20 {
			fmt.Fprintf(os.Stderr, "loopctl: %q: want a number from 1000 to %d\n", arg, 1<<20)
			failed = true
			continue
		}
		if os.Args[1] == "add" {
			err = looptest.AddRaw(n)
		} else {
			err = looptest.RemoveRaw(n)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "loopctl: %s loop%d: %v\n", os.Args[1], n, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
