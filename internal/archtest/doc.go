// Package archtest holds the test that keeps the layout's promise: the
// packages under internal/ form layers in the order data flows through
// iosched, and an import only ever points down them.
package archtest
