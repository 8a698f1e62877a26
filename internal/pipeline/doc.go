// Package pipeline is the one way a disk gets from sysfs to its settings:
// read what the policy needs of it, evaluate the policy, take the probe
// decision remembered or seeded for it, plan, and write the plan under the
// disk's lock. The commands (plan, apply, explain) and the daemon both go
// through it; they differ only in what they do with the result: print it,
// or record it.
package pipeline
