//go:build !cgo

package probe

// cgoThreads: the runtime starts its threads itself, with stacks of its own.
const cgoThreads = false
