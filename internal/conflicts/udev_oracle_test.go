package conflicts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/iosched/iosched/internal/looptest"
	"github.com/iosched/iosched/internal/sysfs"
)

// The loop number the oracle test creates (range 42100-42149, see the
// table in internal/looptest).
const oracleLoop = 42100

// oracleScript runs `udevadm test` for one device in a mount namespace of
// its own (unshare execs it) where udevd's rules directories hold only the
// fixture's files ($4 bound over /usr/lib/udev/rules.d, tmpfs over the
// others), /run/udev is a tmpfs and /dev a tmpfs holding only the nodes
// udevadm opens (so no database, link or node of the host's is read or
// left: udevadm test creates the links SYMLINK+= asks for), and the device
// is the test's loop device under another name: a tmpfs over
// /sys/devices/virtual/block holds a directory named $3 onto which the
// loop's own sysfs directory is bound, so a rule reads and writes the
// loop's attributes while it matches KERNEL== and %k against $3. udevadm
// 252 writes the ATTR{} assignments it evaluates: they land on the test's
// loop and nowhere else. With $5 = 1 the flag file the edge fixtures TEST
// exists, and each program the fixture's oracle-stubs file names (lines
// "PATH KEY=VALUE...") is replaced by one that prints those properties, so
// that what an IMPORT{program} or PROGRAM would tell on a real disk holds.
// The kernel command line IMPORT{cmdline} reads is SYSTEMD_PROC_CMDLINE,
// set by the caller.
const oracleScript = `set -e
stage=$1 loopdir=$2 name=$3 rules=$4 flag=$5 action=$6 stubs=$7 dev=$8 node=$9
mount -t tmpfs tmpfs "$stage"
mkdir "$stage/$name"
mount --bind "$loopdir" "$stage/$name"
mkdir -p /run/udev
mount -t tmpfs tmpfs /run/udev
mount -t tmpfs tmpfs "$dev"
for n in null zero full random urandom "$node"; do
	touch "$dev/$n"
	mount --bind "/dev/$n" "$dev/$n"
done
ln -s /proc/self/fd "$dev/fd"
mount --bind "$dev" /dev
for d in /etc/udev/rules.d /usr/local/lib/udev/rules.d /lib/udev/rules.d; do
	if [ -d "$d" ] && ! [ "$d" -ef /usr/lib/udev/rules.d ]; then mount -t tmpfs tmpfs "$d"; fi
done
mount --bind "$rules" /usr/lib/udev/rules.d
if [ "$flag" = 1 ]; then
	touch /run/udev/iosched-flag
	if [ -f "$stubs" ]; then
		i=0
		while read -r prog props; do
			i=$((i+1))
			printf '#!/bin/sh\n' > /run/udev/stub$i
			for p in $props; do printf 'echo %s\n' "$p" >> /run/udev/stub$i; done
			chmod +x /run/udev/stub$i
			mount --bind /run/udev/stub$i "$prog"
		done < "$stubs"
	fi
fi
mount --rbind "$stage" /sys/devices/virtual/block
exec udevadm test --action="$action" "/sys/devices/virtual/block/$name"
`

// udevadmWrite is a queue attribute write udevadm test made: where, which, what.
type udevadmWrite struct {
	where, attr, value string
}

// The lines of udevadm test 252's output the test reads: a write, and a
// rule refused when the file is read ("FILE:LINE MESSAGE", or "FILE:LINE:
// Line is too long, ignored"). Other messages with a file and line are
// warnings about rules udevd keeps (assuming '=', an invalid value or
// attribute format, an unknown user or group) and are not rejections.
var (
	oracleWriteRE  = regexp.MustCompile(`^\S+: (/\S+\.rules):(\d+) ATTR '/sys/devices/virtual/block/[^/]+/([^']+)' writing '(.*)'$`)
	oracleRejectRE = regexp.MustCompile(`^(/\S+\.rules):(\d+):? (Invalid key '.*'|Invalid attribute for \w+\.|Invalid operator for \w+\.|Invalid key/value pair, ignoring\.|Invalid ENV attribute\. .*|Ignoring NAME=.*|Unknown builtin command.*|Failed to parse .*|Line is too long, ignored)$`)
)

// parseOracle reads udevadm test's output: the queue attribute writes and
// the rules refused.
func parseOracle(out string) (writes []udevadmWrite, rejected []Rejection) {
	for _, line := range strings.Split(out, "\n") {
		if m := oracleWriteRE.FindStringSubmatch(line); m != nil {
			if attr, ok := queueAttr(m[3]); ok {
				writes = append(writes, udevadmWrite{m[1] + ":" + m[2], attr, strings.TrimSpace(m[4])})
			}
			continue
		}
		if m := oracleRejectRE.FindStringSubmatch(line); m != nil {
			var n int
			fmt.Sscan(m[2], &n)
			rejected = append(rejected, Rejection{File: m[1], Line: n, Reason: m[3]})
		}
	}
	return writes, rejected
}

// For every fixture under testdata/udev-oracle (a directory of rules
// files: ones distributions and clouds ship, and edge cases of each kind
// iosched got wrong before), iosched's reading agrees with udevd 252's
// own, run by udevadm test on the test's loop device as disks of several
// names (sda, vda, nvme0n1, mmcblk0 and the loop's own), rotational and
// not, on add and change events, and with a condition iosched cannot
// decide (a file outside the disk's directory, the kernel command line)
// made true and false:
//
//   - the rules udevd refuses are the rules iosched reports rejected, with
//     udevd's reason;
//   - a write iosched says is certain is in udevadm's output in every
//     variant of the undecidable conditions, with that value;
//   - a write iosched says is possible is in udevadm's output in at least
//     one variant (so "possible" is not a guess that never happens);
//   - every write udevadm makes is one iosched reports, with its value
//     (any value where iosched says it cannot know it).
func TestIntegrationUdevRulesAgreeWithUdevadm(t *testing.T) {
	looptest.Require(t)
	for _, tool := range []string{"udevadm", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			looptest.Missing(t, tool+" (Debian packages udev, util-linux): "+err.Error())
		}
	}
	ver, err := exec.Command("udevadm", "--version").Output()
	if err != nil {
		t.Fatalf("udevadm --version: %v", err)
	}
	if v := strings.TrimSpace(string(ver)); udevdMajor(v) != UdevdVersion {
		t.Fatalf("udevadm is version %s; this oracle is udevd %d", v, UdevdVersion)
	}
	fixtures, err := filepath.Glob("testdata/udev-oracle/*")
	if err != nil {
		t.Fatal(err)
	}
	fixtures = slices.DeleteFunc(fixtures, func(p string) bool { st, err := os.Stat(p); return err != nil || !st.IsDir() })
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	loop := looptest.Add(t, oracleLoop)
	loopDir := "/sys/devices/virtual/block/" + loop.Name
	fs, err := sysfs.NewFS("/sys")
	if err != nil {
		t.Fatal(err)
	}
	restore := queueRestorer(t, loopDir)
	t.Cleanup(restore)

	names := []string{"sda", "vda", "nvme0n1", "mmcblk0", loop.Name}
	for _, fixture := range fixtures {
		t.Run(filepath.Base(fixture), func(t *testing.T) {
			abs, err := filepath.Abs(fixture)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			rulesDir := filepath.Join(root, "usr/lib/udev/rules.d")
			if err := os.MkdirAll(rulesDir, 0o755); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(abs, "*.rules"))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(rulesDir, filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The udevd whose reading is compared is this one: its
			// binary under the root tells iosched its version and
			// architecture.
			bin, err := exec.LookPath("udevadm")
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "usr/bin/udevadm"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			set, err := Load(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Notes) > 0 {
				t.Errorf("notes: %q", set.Notes)
			}
			checkedRejections := false
			for _, name := range names {
				for _, rot := range []string{"0", "1"} {
					restore()
					if err := os.WriteFile(loopDir+"/queue/rotational", []byte(rot), 0o644); err != nil {
						t.Fatal(err)
					}
					d, err := fs.Device(loop.Name)
					if err != nil {
						t.Fatal(err)
					}
					d.Name, d.Path, d.DevName = name, "devices/virtual/block/"+name, loop.Name
					known := Known{
						Attr: func(rel string) (string, bool, error) {
							b, err := os.ReadFile(filepath.Join(loopDir, rel))
							switch {
							case err == nil:
								return string(b), true, nil
							case os.IsNotExist(err):
								return "", false, nil
							}
							return "", false, err
						},
						Exists: func(rel string) (bool, error) {
							_, err := os.Stat(filepath.Join(loopDir, rel))
							if os.IsNotExist(err) {
								return false, nil
							}
							return err == nil, err
						},
					}
					ws := set.ForKnown(d, known)
					// udevadm's output in each variant: action, then flag.
					got := map[string][2][]udevadmWrite{}
					for _, action := range []string{"add", "change"} {
						var per [2][]udevadmWrite
						for flag := range 2 {
							restore()
							if err := os.WriteFile(loopDir+"/queue/rotational", []byte(rot), 0o644); err != nil {
								t.Fatal(err)
							}
							out := runOracle(t, loopDir, name, rulesDir, filepath.Join(abs, "oracle-stubs"), flag, action)
							w, rej := parseOracle(out)
							per[flag] = w
							if !checkedRejections {
								checkedRejections = true
								if !sameRejections(set.Rejected, rej) {
									t.Errorf("rules refused:\n iosched %v\n udevd   %v", set.Rejected, rej)
								}
							}
						}
						got[action] = per
					}
					for _, m := range compareWrites(ws, got) {
						t.Errorf("%s (rotational %s): %s", name, rot, m)
					}
				}
			}
		})
	}
}

// runOracle runs udevadm test for the loop as disk name in the fixture's
// rules, returning its output.
func runOracle(t *testing.T, loopDir, name, rulesDir, stubs string, flag int, action string) string {
	t.Helper()
	stage, dev := t.TempDir(), t.TempDir()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", oracleScript, "sh",
		stage, loopDir, name, rulesDir, fmt.Sprint(flag), action, stubs, dev, filepath.Base(loopDir))
	cmdline := "quiet"
	if flag == 1 {
		cmdline = "quiet elevator=none"
	}
	cmd.Env = append(os.Environ(), "SYSTEMD_PROC_CMDLINE="+cmdline, "SYSTEMD_LOG_LEVEL=debug")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("udevadm test %s (%s, flag %d): %v\n%s", name, action, flag, err, out.String())
	}
	return out.String()
}

// compareWrites checks iosched's writes against udevadm's in each
// variant, as TestIntegrationUdevRulesAgreeWithUdevadm says, and returns
// the disagreements.
func compareWrites(ws []Write, got map[string][2][]udevadmWrite) []string {
	var bad []string
	matches := func(w Write, o udevadmWrite) bool {
		return w.Where() == o.where && w.Attribute == o.attr && (len(w.UnknownValue) > 0 || w.Value == o.value)
	}
	for _, w := range ws {
		if w.Kind != UdevRule {
			continue
		}
		for _, action := range w.Actions {
			in := [2]bool{}
			for flag := range 2 {
				in[flag] = slices.ContainsFunc(got[action][flag], func(o udevadmWrite) bool { return matches(w, o) })
			}
			switch {
			case !w.Possible && !(in[0] && in[1]):
				bad = append(bad, fmt.Sprintf("%s on %s: iosched says certain, udevadm wrote it in variants %v", w.Describe(), action, in))
			case w.Possible && !in[0] && !in[1]:
				bad = append(bad, fmt.Sprintf("%s on %s: iosched says possible, udevadm wrote it in no variant", w.Describe(), action))
			}
		}
	}
	for _, action := range []string{"add", "change"} {
		for flag := range 2 {
			for _, o := range got[action][flag] {
				if !slices.ContainsFunc(ws, func(w Write) bool { return slices.Contains(w.Actions, action) && matches(w, o) }) {
					bad = append(bad, fmt.Sprintf("udevadm on %s (variant %d) wrote %s = %q at %s; iosched reports no such write", action, flag, o.attr, o.value, o.where))
				}
			}
		}
	}
	return bad
}

// sameRejections compares the rules iosched says udevd refuses with those
// udevadm logged, by file, line and reason.
func sameRejections(a, b []Rejection) bool {
	key := func(rs []Rejection) []string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s:%d %s", r.File, r.Line, r.Reason))
		}
		sort.Strings(out)
		return slices.Compact(out)
	}
	return slices.Equal(key(a), key(b))
}

// queueRestorer records the loop's writable queue attributes and returns
// a function putting back those that changed, the scheduler first (a
// switch resets nr_requests and the scheduler's own files), so that each
// udevadm run starts from the same disk.
func queueRestorer(t *testing.T, loopDir string) func() {
	t.Helper()
	q := filepath.Join(loopDir, "queue")
	entries, err := os.ReadDir(q)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{}
	var order []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o200 == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(q, e.Name()))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if e.Name() == "scheduler" {
			v = activeScheduler(v)
			order = append([]string{"scheduler"}, order...)
		} else {
			order = append(order, e.Name())
		}
		base[e.Name()] = v
	}
	return func() {
		for _, name := range order {
			p := filepath.Join(q, name)
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			v := strings.TrimSpace(string(b))
			if name == "scheduler" {
				v = activeScheduler(v)
			}
			if v == base[name] {
				continue
			}
			if err := os.WriteFile(p, []byte(base[name]), 0o644); err != nil && !errorsIsInval(err) {
				t.Errorf("restoring %s: %v", p, err)
			}
		}
	}
}

// activeScheduler is the bracketed name in queue/scheduler's text.
func activeScheduler(s string) string {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return s
}

// errorsIsInval: some attributes refuse the value they show (io_poll).
func errorsIsInval(err error) bool { return errors.Is(err, syscall.EINVAL) }
