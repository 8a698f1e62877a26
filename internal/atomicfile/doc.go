// Package atomicfile replaces a file whole: a reader sees the old contents
// or the new, never half of either. The daemon keeps its state file and its
// record of original values this way.
package atomicfile
