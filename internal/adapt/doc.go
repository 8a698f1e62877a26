// Package adapt chooses a disk's scheduler by the depth its workload runs
// at: it reads each candidate's probe curve (package probe's CurvePoint)
// at the operating point the disk is observed at, and says which candidate
// the curve favours there and by how much.
//
// A Controller does that for one disk over time ([rule.adapt], whose
// options are package adaptopt's). It does no I/O and reads no clock, and
// keeps its window in an observe.Window: a fixed size whatever the window
// and the sample rate. Its owner, for each disk an adaptive rule matches:
//
//   - makes it with NewController(options, Curves(record), scheduler now);
//   - every options.Sample, calls Observe with the disk's Sample (SampleOf
//     the observe.Point of its stat deltas over the interval; Switching
//     while a switch it asked for is not yet written) and, when the
//     Decision says Switch, sets To with Reason as the pass's provenance;
//     when it says Unpin (the guard rail's review lifted its pin), keeps
//     the History as after a switch;
//   - calls SetCurves on a new probe result, Reset after a gap in the
//     samples (a probe or a reload held the disk), and State for status,
//     explain and metrics;
//   - keeps the controller's History after each switch, beyond the
//     controller, and gives it to the disk's next one (Restore): the
//     limits count over any 24 hours, not over one controller's life.
package adapt
