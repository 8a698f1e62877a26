// Package probe measures a disk before iosched chooses its scheduler: a short,
// read-only benchmark of each candidate scheduler on the disk itself
// (random O_DIRECT reads through io_uring or pread), a decision that weighs
// deep-queue IOPS against depth-1 latency, and a store of the answers keyed
// by what makes two disks behave alike. It puts back every setting it changes.
//
// The rounds say how far to trust the figures: candidates within the margin
// or the rounds' own spread of each other are reported as no difference
// and the incumbent stays; rounds that disagree as a changed rate does (a
// step between measurements, or a trend over the rounds) mark the result
// disturbed, and no decision is made from it.
package probe
