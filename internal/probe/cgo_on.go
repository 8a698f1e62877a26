//go:build cgo

package probe

// cgoThreads: the runtime starts its threads through pthread_create.
const cgoThreads = true
