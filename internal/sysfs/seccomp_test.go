package sysfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Under systemd's RestrictSUIDSGID= (and on kernels before 5.6) openat2
// fails with ENOSYS: queue attributes must still be read and written, and
// links out of the root still refused. The filter is installed in a child
// process (a seccomp filter cannot be removed).
func TestQueueAttrsWithoutOpenat2(t *testing.T) {
	t.Parallel()
	if os.Getenv("IOSCHED_TEST_NO_OPENAT2") != "" {
		noOpenat2(t)
		fs := newFS(t, os.Getenv("IOSCHED_TEST_NO_OPENAT2"))
		if err := fs.WriteQueueAttr("vda", "read_ahead_kb", "4096"); err != nil {
			t.Fatalf("write: %v", err)
		}
		if v, err := fs.ReadQueueAttr("vda", "read_ahead_kb"); err != nil || v != "4096" {
			t.Fatalf("read back %q, %v", v, err)
		}
		if active, _, err := fs.ReadScheduler("vda"); err != nil || active != "mq-deadline" {
			t.Fatalf("scheduler %q, %v", active, err)
		}
		if err := fs.WriteQueueAttr("escape", "read_ahead_kb", "1"); err == nil {
			t.Fatal("a link out of the root was written through")
		}
		// A Disk handle opened without openat2 writes by path.
		disk, err := fs.OpenDisk("vda")
		if err != nil {
			t.Fatalf("OpenDisk: %v", err)
		}
		defer disk.Close()
		if got, written, err := disk.WriteReadQueueAttr("read_ahead_kb", "2048"); err != nil || !written || got != "2048" {
			t.Fatalf("write through the handle: %q, %v, %v", got, written, err)
		}
		return
	}
	root := copyTree(t, cloudTree)
	outside := filepath.Join(t.TempDir(), "queue")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "read_ahead_kb"), []byte("128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "block", "escape")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueAttrsWithoutOpenat2$", "-test.v")
	cmd.Env = append(os.Environ(), "IOSCHED_TEST_NO_OPENAT2="+root)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child without openat2: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "read_ahead_kb")); string(b) != "128\n" {
		t.Fatalf("the file outside the root was written: %q", b)
	}
}

// noOpenat2 makes openat2 fail with ENOSYS in this process, as systemd's
// seccomp_restrict_sxid does.
func noOpenat2(t *testing.T) {
	runtime.LockOSThread()
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // the system call number
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_OPENAT2},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp))); e != 0 {
		t.Fatal(e)
	}
	if _, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{}); err != unix.ENOSYS {
		t.Fatalf("openat2 under the filter: %v, want ENOSYS", err)
	}
}
