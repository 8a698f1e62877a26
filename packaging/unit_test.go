// Package packaging holds the systemd unit, the package build and their
// checks; its test holds the unit to its hardening score and keeps
// systemd-analyze verify clean, for the unit alone and with the udev-mode
// drop-in.
package packaging

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iosched/iosched/internal/daemon"
)

// maxExposure is the highest `systemd-analyze security` score the unit may
// have, in tenths (15: 1.5), as its --threshold takes it.
const maxExposure = 15

// systemdAnalyze returns the path of systemd-analyze (Debian package
// systemd). CI sets IOSCHED_INTEGRATION=required: there a missing tool is a
// failure, not a skip.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err == nil {
		return p
	}
	if os.Getenv("IOSCHED_INTEGRATION") == "required" {
		t.Fatalf("systemd-analyze not found (Debian package systemd): %v (IOSCHED_INTEGRATION=required)", err)
	}
	t.Skipf("systemd-analyze not found (Debian package systemd): %v", err)
	return ""
}

// unitDir lays out the unit as systemd would read it, in a directory of
// its own, with ExecStart= and ExecReload= pointing at a freshly built
// binary (verify checks that the command exists and is executable; the
// package installs it as /usr/bin/iosched). With dropIn, the udev-mode
// drop-in goes in iosched.service.d/, where systemd-analyze loads it from.
// It returns the unit's path and the binary's.
func unitDir(t *testing.T, dropIn bool) (unit, bin string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "iosched")
	build := exec.Command("go", "build", "-o", bin, "../cmd/iosched")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/iosched: %v\n%s", err, out)
	}
	rewrite := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "/usr/bin/iosched") {
			t.Fatalf("%s: no /usr/bin/iosched command", src)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(strings.ReplaceAll(string(b), "/usr/bin/iosched", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unit = filepath.Join(dir, "iosched.service")
	rewrite("iosched.service", unit)
	if dropIn {
		rewrite("udev-mode.conf", filepath.Join(dir, "iosched.service.d", "udev-mode.conf"))
	}
	return unit, bin
}

// verify runs systemd-analyze verify on unit and fails on any message. Man
// pages are not looked up: the package generates them (internal/mangen,
// tested there), so they are not installed where this runs.
func verify(t *testing.T, sa, unit string) {
	t.Helper()
	out, err := exec.Command(sa, "verify", "--man=no", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(unit), err, out)
	}
}

// securityItem is one line of `systemd-analyze security --json=short`.
// Set is null for options that do not apply (e.g. RemoveIPC= for root);
// Exposure is a decimal string ("0.2"), null when the option is set.
type securityItem struct {
	Set      *bool   `json:"set"`
	Name     string  `json:"name"`
	Exposure *string `json:"exposure"`
}

func (it securityItem) set() bool { return it.Set != nil && *it.Set }

func (it securityItem) exposure() float64 {
	if it.Exposure == nil {
		return 0
	}
	f, err := strconv.ParseFloat(*it.Exposure, 64)
	if err != nil {
		return 10
	}
	return f
}

// security returns the score's lines for unit, by name.
func security(t *testing.T, sa, unit string) map[string]securityItem {
	t.Helper()
	out, err := exec.Command(sa, "security", "--offline=true", "--json=short", unit).Output()
	if err != nil {
		t.Fatalf("systemd-analyze security --json=short %s: %v", unit, err)
	}
	var items []securityItem
	if err := json.Unmarshal(out, &items); err != nil {
		t.Fatalf("systemd-analyze security --json=short: %v\n%.500s", err, out)
	}
	byName := make(map[string]securityItem, len(items))
	for _, it := range items {
		byName[it.Name] = it
	}
	return byName
}

func TestUnitHardening(t *testing.T) {
	sa := systemdAnalyze(t)
	unit, _ := unitDir(t, false)
	verify(t, sa, unit)

	// The overall score, as systemd-analyze computes it: --threshold makes
	// it exit non-zero above the bound.
	out, err := exec.Command(sa, "security", "--offline=true", "--threshold=15", unit).CombinedOutput()
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if err != nil {
		t.Errorf("systemd-analyze security: %v: above %d.%d: %s", err, maxExposure/10, maxExposure%10, last)
	}
	t.Log(last)

	// What the score rests on must stay: a lower bound cannot catch an
	// option dropped while another one was added.
	items := security(t, sa, unit)
	for _, name := range []string{
		"PrivateNetwork=", "ProtectClock=", "UMask=", "NoNewPrivileges=",
		"ProtectSystem=", "SystemCallFilter=~@privileged", "RestrictNamespaces=~user",
		"CapabilityBoundingSet=~CAP_SYS_ADMIN", "IPAddressDeny=",
	} {
		if it, ok := items[name]; !ok || !it.set() {
			t.Errorf("%s: not set (%+v)", name, it)
		}
	}
	// 0.2 without an allow-list, 0.1 with one naming device classes.
	if it := items["DeviceAllow="]; it.exposure() > 0.1 {
		t.Errorf("DeviceAllow=: no device allow-list (%+v)", it)
	}
}

// The drop-in for udev mode gives up the private network namespace (udevd's
// events are multicast in the host's only) and nothing else, and starts
// the daemon in udev mode with a flag the binary has.
func TestUnitUdevModeDropIn(t *testing.T) {
	sa := systemdAnalyze(t)
	plain, _ := unitDir(t, false)
	udev, bin := unitDir(t, true)
	verify(t, sa, udev)

	before, after := security(t, sa, plain), security(t, sa, udev)
	if !before["PrivateNetwork="].set() || after["PrivateNetwork="].set() {
		t.Fatalf("PrivateNetwork=: set %v without the drop-in, %v with it; want true, false (the drop-in was not loaded?)",
			before["PrivateNetwork="].set(), after["PrivateNetwork="].set())
	}
	for name, b := range before {
		if name == "PrivateNetwork=" {
			continue
		}
		if a := after[name]; a.set() != b.set() || a.exposure() != b.exposure() {
			t.Errorf("%s: %+v without the drop-in, %+v with it: the drop-in must relax PrivateNetwork= only", name, b, a)
		}
	}

	b, err := os.ReadFile("udev-mode.conf")
	if err != nil {
		t.Fatal(err)
	}
	var exec1 string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "ExecStart=/") {
			exec1 = line
		}
	}
	if !strings.Contains(exec1, " daemon ") || !strings.HasSuffix(exec1, "--uevent-source udev") {
		t.Fatalf("udev-mode.conf: ExecStart %q does not start the daemon with --uevent-source udev", exec1)
	}
	help, err := exec.Command(bin, "daemon", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "--uevent-source") {
		t.Fatalf("iosched daemon --help: no --uevent-source flag: %v\n%s", err, help)
	}
}

// build.sh stages and nfpm.yaml installs the drop-in where the README says.
func TestPackageShipsDropIn(t *testing.T) {
	b, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "src: packaging/udev-mode.conf\n    dst: /usr/share/iosched/udev-mode.conf") {
		t.Error("nfpm.yaml: packaging/udev-mode.conf is not installed as /usr/share/iosched/udev-mode.conf")
	}
	r, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r), "/usr/share/iosched/udev-mode.conf") {
		t.Error("packaging/README.md does not say where the udev-mode drop-in is")
	}
}

// TestUnitStopTimeout: systemd must give the daemon's stop the time the
// daemon gives itself (daemon.StopBound, with the default StopTimeout,
// which the unit does not change), or it kills the daemon in the middle of
// putting the original values back; and not much more, so a daemon that
// overruns its own bound is not waited for long. Neither can make a process
// with a thread in a write to a frozen queue exit before the disk answers.
func TestUnitStopTimeout(t *testing.T) {
	b, err := os.ReadFile("iosched.service")
	if err != nil {
		t.Fatal(err)
	}
	var stop time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "TimeoutStopSec=")
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(v); err == nil {
			v += "s" // systemd reads a bare number as seconds
		}
		if stop, err = time.ParseDuration(v); err != nil {
			t.Fatalf("TimeoutStopSec=%s: %v", v, err)
		}
	}
	for _, f := range []string{"udev-mode.conf"} {
		if b, err := os.ReadFile(f); err != nil || strings.Contains(string(b), "TimeoutStopSec=") {
			t.Errorf("%s sets TimeoutStopSec= (or cannot be read: %v): keep it in the unit, where this test reads it", f, err)
		}
	}
	bound := daemon.StopBound(daemon.DefaultStopTimeout)
	if stop <= bound || stop > bound+10*time.Second {
		t.Errorf("TimeoutStopSec=%s, the daemon's stop takes up to %s: want above it, by at most 10 s", stop, bound)
	}
}
