// Package paths is the one place that says where iosched finds the
// machine's files and keeps its own. Every package takes its paths from a
// caller (a command's flags, the daemon's config, a test's temporary
// tree); Default is what those callers start from.
package paths

// Paths are the directories and files iosched reads and writes.
type Paths struct {
	// Sys is sysfs's mount point: the block devices and their queues.
	Sys string
	// Dev holds the disks' device nodes (the NOWAIT check and probes
	// open them read-only).
	Dev string
	// PolicyFile and PolicyDir make up the policy: the file, then the
	// directory's *.toml in name order.
	PolicyFile string
	PolicyDir  string
	// State is the state directory: remembered probe results, the
	// adaptive rules' switch history. It survives reboots.
	State string
	// Runtime is the running daemon's directory: its lock, state.json,
	// the original values it will restore. It goes with the boot.
	Runtime string
	// DiskLock is the machine's lock of each disk's settings, shared by
	// every iosched process whatever its state directory. /run/lock is a
	// tmpfs (FHS 3.0, 5.9): the locks of a boot go with it.
	DiskLock string
	// BootID names this boot (proc(5)): records that must not outlive
	// the boot carry it.
	BootID string
}

// Default are the paths of an installed iosched on a running machine.
var Default = Paths{
	Sys:        "/sys",
	Dev:        "/dev",
	PolicyFile: "/etc/iosched/policy.toml",
	PolicyDir:  "/etc/iosched/policy.d",
	State:      "/var/lib/iosched",
	Runtime:    "/run/iosched",
	DiskLock:   "/run/lock/iosched/disks.lock",
	BootID:     "/proc/sys/kernel/random/boot_id",
}
