// Package policy is the TOML policy language: decoding it strictly, validating
// it into rules with errors that say where, matching rules against a disk and
// merging their settings with provenance, and the default policy embedded in
// the binary. It never touches a file descriptor of a device.
//
// The language (default.toml is a commented example; contrib/policies has
// more):
//
//   - [[rule]] tables are read in order, across files too (Load reads a
//     directory's *.toml files in lexical order). Every rule that matches a
//     disk contributes its [rule.set]; a later rule overrides an earlier one
//     setting by setting, and Evaluate records whom it overrode.
//   - name is required and unique in the whole policy.
//   - [rule.match]: its keys are the table in keys.go. Every key must hold;
//     a list means "any of"; an empty or missing match matches every disk.
//     [rule.except] has the same keys: the rule does not apply when all of
//     them hold (an empty except excludes nothing). Several [[rule.except]] tables: the rule does not apply when
//     any one of them holds entirely, which is how "unless A, or unless B"
//     is written.
//   - A fact the kernel did not report (rotational or size missing, no
//     driver, no model, NOWAIT untested, no udev properties) never satisfies
//     a key that tests it, in match or in except.
//   - Sizes are integers (bytes) or strings with binary units: K and KiB
//     both mean 1024, likewise M, G, T, P. Decimal units (GB) are refused
//     as ambiguous, fractions as inexact.
//   - Settings accept only values the kernel keeps as written; the ranges
//     in sysfs.Attributes say what is refused and why (wbt_lat_usec = -1
//     and max_sectors_kb = 0 mean "restore the default" and would never
//     read back equal, so iosched would rewrite them forever).
//   - A rule without [rule.set] is valid: it names a kind of disk on purpose
//     left as the kernel set it, and plan and explain show it matched.
//   - [rule.probe] (probe.go) says how to measure a matching disk before
//     choosing its scheduler: candidates, duration, rounds, depth,
//     block_size, engine, choose, margin, max_age, each checked against the
//     Probe* limits. A later matching rule's table replaces an earlier one's
//     whole. New rule tables are added as a case in decoder.rule and a
//     field of Rule.
//   - [daemon]: uevent_source ("kernel" or "udev"), reconcile_interval (a Go
//     duration, default DefaultReconcileInterval, "0" for off),
//     restore_on_exit (default false), probe_concurrency (default 1),
//     probe_budget (total probe time per start, "0" no limit), probe_results
//     (absolute globs of seeded result files), metrics_file (a *.prom path
//     for node_exporter's textfile collector, default "": none). A later
//     file's keys override an earlier file's, key by key.
package policy
