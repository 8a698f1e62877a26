// Package looptest creates and removes real loop and zram devices for
// integration tests, through /dev/loop-control and /sys/class/zram-control,
// loop devices that stop answering when a test says so (AddGated), and
// slow ones whose requests spend their time in the device (AddSlow), with
// a Reader that keeps a known number of reads in flight on them.
// Each test package uses its own range of loop numbers (see Ranges) so that
// packages running at once never touch each other's devices, and nothing
// outside those ranges is ever created, bound or removed.
package looptest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Which loop numbers each user owns; each uses numbers only from its own
// range, so packages tested at once never touch each other's devices:
//
//	sysfs, devnode, cli (list)     7100-7189
//	looptest itself                7190-7199
//	apply 7200-7209, cli (apply)   7210-7219
//	probe 7300-7349, cli (probe)   7350-7389
//	probe manual runs, benchmarks  7390-7399
//	cli (probe, real binary)       7650-7689
//	observe 7400-7449, cli (advise) 7450-7489
//	diskemu (emulated disks)       7500-7519
//	cli (advise against iostat)    7520-7539
//	daemon adaptive, emulated disks 7540-7579
//	daemon adaptive guard rail, emulated 7580-7599
//	probe (io-wq hand-offs)        7720-7759
//	probe on emulated disks        7690-7719
//	README walkthrough (loopctl)   7000-7099
//	daemon tests                   20000-23999
//	daemon against a real udevd    5900-5999
//	apply benchmark                30000-30999
//	observe, advise manual runs    31000-31499
//	contrib/bench                  40000-41999 (BASE=44000: 44000-45999)
//	contrib/kubernetes (pod test)  42000-42009
//	contrib/udev (rule test)       42010-42019
//	conflicts (udevadm oracle)     42100-42149
//	fleetit (three machines)       43000-43099

// Require fails or skips t unless this is root on a machine with
// /dev/loop-control. With IOSCHED_INTEGRATION=required (as .ci/run sets) a
// missing prerequisite is a failure, never a skip.
func Require(t testing.TB) {
	t.Helper()
	var why string
	switch {
	case os.Geteuid() != 0:
		why = "integration test needs root"
	default:
		if _, err := os.Stat("/dev/loop-control"); err != nil {
			why = "integration test needs /dev/loop-control: " + err.Error()
		}
	}
	if why != "" {
		Missing(t, why)
	}
}

// Missing fails t when IOSCHED_INTEGRATION=required, else skips it: a
// prerequisite of the integration test (why) is missing.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("IOSCHED_INTEGRATION") == "required" {
		t.Fatal(why + " (IOSCHED_INTEGRATION=required)")
	}
	t.Skip(why)
}

// Loop is a loop device created by a test.
type Loop struct {
	N       int
	Name    string // "loop7100"
	Backing string // backing file, when bound
	// keepBacking: the backing file is the caller's (BindFile).
	keepBacking bool
}

// Add creates loop device n with LOOP_CTL_ADD and registers its removal
// with t.Cleanup. It fails the test if n already exists: the range belongs
// to the test, and an existing device there is someone else's.
func Add(t testing.TB, n int) *Loop {
	t.Helper()
	if err := AddRaw(n); err != nil {
		t.Fatalf("LOOP_CTL_ADD %d: %v", n, err)
	}
	l := &Loop{N: n, Name: "loop" + strconv.Itoa(n)}
	t.Cleanup(func() { l.Remove(t) })
	waitNode(t, "/dev/"+l.Name)
	return l
}

// AddRaw creates loop device n, for callers (benchmarks) that manage removal
// themselves with RemoveRaw.
func AddRaw(n int) error {
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return ctl(fd, unix.LOOP_CTL_ADD, n)
}

// RemoveRaw removes loop device n (LOOP_CTL_REMOVE), retrying while it is
// busy (still being opened by a probe or a udev rule).
func RemoveRaw(n int) error {
	fd, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for i := 0; ; i++ {
		err = ctl(fd, unix.LOOP_CTL_REMOVE, n)
		if err == nil || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || i >= 50 {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctl(fd int, req uint, n int) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(n))
	if errno != 0 {
		return errno
	}
	return nil
}

// Remove detaches the backing file, removes the device and deletes the
// backing file Bind made. It is safe to call twice.
func (l *Loop) Remove(t testing.TB) {
	t.Helper()
	if l.Backing != "" {
		if fd, err := unix.Open("/dev/"+l.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
			unix.Close(fd)
		}
		if !l.keepBacking {
			os.Remove(l.Backing)
		}
		l.Backing = ""
	}
	if err := RemoveRaw(l.N); err != nil {
		t.Errorf("LOOP_CTL_REMOVE %d: %v", l.N, err)
	}
}

// Bind attaches a new sparse file of size bytes in /dev/shm to the loop
// device (read-only loop, direct I/O off), so it has a size and real I/O.
func (l *Loop) Bind(t testing.TB, size int64) {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "iosched-"+l.Name+"-*.img")
	if err != nil {
		t.Fatal(err)
	}
	l.Backing = f.Name()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l.configure(t, f)
}

// BindFile attaches the existing file path to the loop device, read-only,
// and leaves the file in place when the loop is removed.
func (l *Loop) BindFile(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l.Backing, l.keepBacking = path, true
	l.configure(t, f)
}

func (l *Loop) configure(t testing.TB, f *os.File) {
	t.Helper()
	dev, err := unix.Open("/dev/"+l.Name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/%s: %v", l.Name, err)
	}
	defer unix.Close(dev)
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY
	copy(cfg.Info.File_name[:], f.Name())
	if err := unix.IoctlLoopConfigure(dev, &cfg); err != nil {
		t.Fatalf("LOOP_CONFIGURE %s: %v", l.Name, err)
	}
}

func waitNode(t testing.TB, p string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
}

// Zram is a zram device created through /sys/class/zram-control/hot_add.
type Zram struct {
	ID   int
	Name string
}

// AddZram creates a zram device with the given disksize and registers its
// removal. It needs the zram module loaded (zram-control present).
func AddZram(t testing.TB, disksize int64) *Zram {
	t.Helper()
	b, err := os.ReadFile("/sys/class/zram-control/hot_add")
	if err != nil {
		if os.Getenv("IOSCHED_INTEGRATION") == "required" {
			t.Fatalf("zram hot_add: %v", err)
		}
		t.Skipf("zram hot_add: %v", err)
	}
	id, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("zram hot_add returned %q", b)
	}
	z := &Zram{ID: id, Name: "zram" + strconv.Itoa(id)}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join("/sys/block", z.Name, "reset"), []byte("1"), 0)
		if err := os.WriteFile("/sys/class/zram-control/hot_remove", []byte(strconv.Itoa(id)), 0); err != nil {
			t.Errorf("zram hot_remove %d: %v", id, err)
		}
	})
	if err := os.WriteFile(filepath.Join("/sys/block", z.Name, "disksize"), []byte(strconv.FormatInt(disksize, 10)), 0); err != nil {
		t.Fatalf("zram %s disksize: %v", z.Name, err)
	}
	waitNode(t, "/dev/"+z.Name)
	return z
}

// Name returns "loop<n>".
func Name(n int) string { return fmt.Sprintf("loop%d", n) }
