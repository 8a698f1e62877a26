package conflicts

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/sysfs"
)

// loadBounded runs Load in a goroutine and fails the test if it does not
// return within a few seconds.
func loadBounded(t *testing.T, root string) *Set {
	t.Helper()
	done := make(chan *Set, 1)
	go func() {
		s, err := Load(root)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("Load did not return: it blocked on a file")
		return nil
	}
}

func writeFile(t *testing.T, root, p, text string) string {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return full
}

// tuned's active_profile and profiles, and the rules files, are read the
// safe way: a FIFO, a link to /dev/zero or a file over the cap is a
// problem naming the file, at once. Before, a FIFO active_profile hung
// plan and the daemon's conflict check, and /dev/zero ran them out of
// memory.
func TestLoadRefusesWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	for name, create := range map[string]func(t *testing.T, p string){
		"fifo": func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"zero": func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		},
	} {
		for _, file := range []string{TunedActiveProfile, "/usr/lib/tuned/x/tuned.conf"} {
			t.Run(name+file, func(t *testing.T) {
				root := t.TempDir()
				writeFile(t, root, TunedActiveProfile, "x\n")
				writeFile(t, root, "/usr/lib/tuned/x/tuned.conf", "[disk]\nelevator=bfq\n")
				p := filepath.Join(root, file)
				os.Remove(p)
				create(t, p)
				s := loadBounded(t, root)
				// A profile that is not a regular file is not one, as
				// tuned's locator (os.path.isfile) sees it.
				want := p + ": not a regular file"
				if file != TunedActiveProfile {
					want = `tuned profile "x": no x/tuned.conf`
				}
				if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], want) {
					t.Errorf("problems = %q, want one saying %s", s.Problems, want)
				}
			})
		}
	}
	t.Run("large rules file", func(t *testing.T) {
		root := t.TempDir()
		p := writeFile(t, root, "/etc/udev/rules.d/60-big.rules", "")
		if err := os.Truncate(p, maxRulesFile+1); err != nil { // sparse
			t.Fatal(err)
		}
		s := loadBounded(t, root)
		if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], fmt.Sprintf("%s: larger than %d bytes", p, maxRulesFile)) {
			t.Errorf("problems = %q, want one naming %s as too large", s.Problems, p)
		}
	})
	t.Run("rules files too large together", func(t *testing.T) {
		root := t.TempDir()
		// Long comment lines (shorter than udevd's limit on a line).
		line := "#" + strings.Repeat("x", 8<<10-2) + "\n"
		text := strings.Repeat(line, maxRulesFile/len(line))
		n := maxRulesTotal/len(text) + 1
		for i := range n {
			writeFile(t, root, fmt.Sprintf("/etc/udev/rules.d/%02d-x.rules", i), text)
		}
		s := loadBounded(t, root)
		if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], fmt.Sprintf("%02d-x.rules", n-1)) ||
			!strings.Contains(s.Problems[0], "together") {
			t.Errorf("problems = %q, want the last file named, over the total", s.Problems)
		}
	})
}

// GOTOs are resolved once a file, as udevd resolves them when it reads the
// file: a GOTO to a label that is not there is dropped with one problem,
// and evaluating a disk does not search for labels again (a search per
// GOTO, disk and event grows with the file's length times its GOTOs).
func TestGotoWorkIsBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	const n = 40000
	for i := range n {
		fmt.Fprintf(&b, "KERNEL==\"sd*\", GOTO=\"missing_%d\"\n", i)
	}
	b.WriteString(`KERNEL=="sd*", ATTR{queue/scheduler}="bfq"` + "\n")
	b.WriteString(`KERNEL=="sd*", GOTO="end"` + "\n")
	b.WriteString(`KERNEL=="sd*", ATTR{queue/scheduler}="kyber"` + "\n")
	b.WriteString(`LABEL="end"` + "\n")
	root := t.TempDir()
	writeFile(t, root, "/etc/udev/rules.d/60-gotos.rules", b.String())
	s := loadBounded(t, root)
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], fmt.Sprintf("%d GOTOs have no matching LABEL", n)) ||
		!strings.Contains(s.Problems[0], "60-gotos.rules:1:") {
		t.Errorf("problems = %q, want one counting the GOTOs without a label", s.Problems)
	}
	done := make(chan []Write, 1)
	go func() {
		var ws []Write
		for _, d := range []*sysfs.Device{hdd, hdd2, ssd} {
			ws = append(ws, s.For(d)...)
		}
		done <- ws
	}()
	select {
	case ws := <-done:
		// The GOTO to "end" skips kyber; the dropped ones skip nothing.
		if len(ws) != 3 || ws[0].Value != "bfq" || ws[2].Value != "bfq" {
			t.Errorf("writes = %v, want bfq for each of the 3 disks", briefs(ws))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("evaluating 3 disks against the rules did not end in 3 s")
	}
}

// A rule's ATTR{} tests and tuned's removable filter are decided from the
// disk's own sysfs values when the snapshot does not hold them (plan reads
// only what the policy needs), so only the writers that act on the disk
// are named, and without "not known here". Before, plan vda on a virtio
// disk whose rotational is 1 named both distro rules, each "if
// ATTR{queue/rotational}==... (not known here)", and tuned's [disk] "if the
// disk is not removable (not known here)" although removable is 0.
func TestForDecidesFromTheDisksValues(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const rules = "/etc/udev/rules.d/60-ioschedulers.rules"
	writeFile(t, root, rules, `ACTION=="add|change", KERNEL=="sd[a-z]|vd[a-z]", ATTR{queue/rotational}=="0", ATTR{queue/scheduler}="mq-deadline"
ACTION=="add|change", KERNEL=="sd[a-z]|vd[a-z]", ATTR{queue/rotational}=="1", ATTR{queue/scheduler}="bfq"
ACTION=="add|change", KERNEL=="vd[a-z]", ATTR{queue/scheduler}=="*\[none\]*", ATTR{queue/read_ahead_kb}="4096"
ACTION=="add|change", KERNEL=="vd[a-z]", ATTR{device/features}=="1*", ATTR{queue/nr_requests}="64"
`)
	writeFile(t, root, TunedActiveProfile, "x\n")
	const conf = "/usr/lib/tuned/x/tuned.conf"
	writeFile(t, root, conf, "[disk]\nreadahead=>4096\n")
	s := loadBounded(t, root)
	if len(s.Problems) != 0 {
		t.Fatalf("problems: %q", s.Problems)
	}
	// vda as plan reads it for a policy that tests neither rotational
	// nor removable.
	d := &sysfs.Device{Name: "vda", Class: sysfs.ClassVirtio, Path: "devices/pci0000:00/0000:00:04.0/virtio1/block/vda",
		Scheduler: ptr("mq-deadline"), Schedulers: []string{"mq-deadline", "kyber", "bfq", "none"}}
	tree := map[string]string{"queue/rotational": "1\n", "removable": "0\n"}
	read := func(rel string) (string, bool, error) {
		if rel == "device/features" {
			return "", false, unix.EACCES // cannot be told
		}
		v, ok := tree[rel]
		return v, ok, nil
	}
	for _, c := range []struct {
		name  string
		known Known
		want  []brief
	}{
		{"snapshot only", Known{}, []brief{
			{rules + ":1", "scheduler", "mq-deadline", "add,change", `ATTR{queue/rotational}=="0"`},
			{rules + ":2", "scheduler", "bfq", "add,change", `ATTR{queue/rotational}=="1"`},
			{rules + ":4", "nr_requests", "64", "add,change", `ATTR{device/features}=="1*"`},
			{conf + ":2", "read_ahead_kb", "4096", "", "the disk is not removable (tuned's disk plug-in takes only those)"},
		}},
		{"the disk's values", Known{Attr: read}, []brief{
			{rules + ":2", "scheduler", "bfq", "add,change", ""},
			{rules + ":4", "nr_requests", "64", "add,change", `ATTR{device/features}=="1*"`},
			{conf + ":2", "read_ahead_kb", "4096", "", ""},
		}},
		// The policy sets the scheduler: whether the disk shows none
		// when udevd tests it depends on who runs first.
		{"an attribute the policy writes", Known{Attr: read, Written: []string{"scheduler"}}, []brief{
			{rules + ":2", "scheduler", "bfq", "add,change", ""},
			{rules + ":3", "read_ahead_kb", "4096", "add,change", `ATTR{queue/scheduler}=="*\[none\]*"`},
			{rules + ":4", "nr_requests", "64", "add,change", `ATTR{device/features}=="1*"`},
			{conf + ":2", "read_ahead_kb", "4096", "", ""},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := briefs(s.ForKnown(d, c.known)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ForKnown:\n got %q\nwant %q", got, c.want)
			}
		})
	}
	// A removable disk is not tuned's; a missing removable file on a
	// tree that tells (present false) is not either.
	for _, v := range []string{"1", ""} {
		tree["removable"] = v
		if v == "" {
			delete(tree, "removable")
		}
		for _, w := range s.ForKnown(d, Known{Attr: read}) {
			if w.Kind == TunedProfile {
				t.Errorf("removable %q: tuned named: %s", v, w.Describe())
			}
		}
	}
}
