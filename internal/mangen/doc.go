// Command mangen writes iosched's manual pages: one section 1 page per
// command of the cobra tree (cli.NewRoot), so the pages cannot drift from
// --help, and iosched-policy(5), the policy language, from
// iosched-policy.5.md with the match keys filled in from the policy
// package's table (policy.MatchKeyDocs). packaging/build.sh runs it and
// ships the result.
//
//	go run ./internal/mangen -out DIR
//
// writes DIR/man1/*.1 and DIR/man5/iosched-policy.5. The version in the
// pages' header is the binary's (set it with the same -ldflags -X as the
// build); the date comes from SOURCE_DATE_EPOCH when set, so a rebuild of
// the same commit gives the same pages.
package main
