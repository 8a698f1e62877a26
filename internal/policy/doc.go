// Package policy is the TOML policy language: decoding it strictly, validating
// it into rules with errors that say where, matching rules against a disk and
// merging their settings with provenance, and the default policy embedded in
// the binary. It never touches a file descriptor of a device.
//
// The language itself is described once, for its users, in iosched-policy(5)
// (internal/mangen/iosched-policy.5.md; its list of match keys is generated
// from this package's table). Where its parts live here:
//
//   - match and except keys: matchKeys in keys.go, one entry a key (its
//     parser, the facts it needs, its manual entry);
//   - [rule.set]: the settable attributes and the values the kernel keeps as
//     written are sysfs.Attributes; this package validates against them;
//   - [rule.probe]: probe.go reads it into probeopt.Options, whose one
//     validation `iosched probe` uses too, each problem at its key;
//   - [rule.adapt]: adapt.go reads it into adaptopt.Options (package
//     adapt's, which holds the decision), and checks once every file is
//     read that each adaptive rule has curves to read;
//   - [daemon]: Daemon and its defaults (DefaultReconcileInterval);
//   - a new rule table is a case in decoder.rule and a field of Rule;
//   - Load reads a file or a directory's *.toml in lexical order as one
//     policy; Evaluate merges matching rules in order and records whom each
//     setting overrode.
package policy
