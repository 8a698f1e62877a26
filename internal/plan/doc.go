// Package plan turns a disk's snapshot and the settings the policy wants for
// it into a plan: the changes to make (current -> target, in the order they
// must be written) and the settings that cannot be made, with the reason. It
// reads and writes nothing.
package plan
