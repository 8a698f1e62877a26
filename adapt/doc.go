// Package adapt chooses a disk's scheduler by the depth its workload runs
// at: it reads each candidate's probe curve (package probe's CurvePoint)
// at the operating point the disk is observed at, and says which candidate
// the curve favours there and by how much.
package adapt
