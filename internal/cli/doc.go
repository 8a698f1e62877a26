// Package cli is iosched's command tree: flags, wiring of the sysfs, policy,
// plan, apply and daemon packages, and the text and JSON renderings users
// see. cmd/iosched only calls Main.
package cli
