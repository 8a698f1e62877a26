package policy

import (
	"errors"
	"strings"
	"testing"
)

// errorLines parses files and returns each error as the user sees it.
func errorLines(t *testing.T, files ...File) []string {
	t.Helper()
	p, err := Parse(files...)
	if err == nil {
		t.Fatalf("Parse succeeded (%d rules), want errors", len(p.Rules))
	}
	var es *Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, want *Errors: %v", err, err)
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != len(*es) {
		t.Errorf("Error() has %d lines for %d errors", got, len(*es))
	}
	var out []string
	for _, e := range *es {
		out = append(out, e.Error())
	}
	return out
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "syntax error has line and column",
			src:  "[[rule]]\nname = \"x\"\n[rule.match\n",
			want: []string{"p.toml:3:12: expected '.' or ']' to end table name, but got '\\n' instead"},
		},
		{
			name: "syntax error messages stay on one line",
			src:  "[[rule]]\nname = \"a\"\n[rule.set]\nnomerges = 0x\n",
			want: []string{`p.toml:4:12: not a hexadecimal number: '0x\n'`},
		},
		{
			name: "unknown top-level key",
			src:  "[[rule]]\nname = \"x\"\n\n[deamon]\nuevent_source = \"udev\"\n",
			want: []string{`p.toml:4:1: deamon: unknown key; did you mean "daemon"?`},
		},
		{
			name: "unknown key with suggestion",
			src:  "[[rule]]\nname = \"x\"\n[rule.set]\nreadahead_kb = 128\n",
			want: []string{`p.toml:4:1: rule 1 "x": set.readahead_kb: unknown key; did you mean "read_ahead_kb"?`},
		},
		{
			name: "unknown key without suggestion lists the valid ones",
			src:  "[[rule]]\nname = \"x\"\ncolour = \"blue\"\n",
			want: []string{`p.toml:3:1: rule 1 "x": colour: unknown key (valid: name, match, except, set, probe, adapt, observe)`},
		},
		{
			name: "key in the wrong table",
			src:  "[[rule]]\nname = \"x\"\n[rule.match]\nscheduler = \"none\"\n[rule.set]\nclass = \"virtio\"\nfifo_batch = 16\n",
			want: []string{
				`p.toml:4:1: rule 1 "x": match.scheduler: unknown key here: "scheduler" belongs in [rule.set]`,
				`p.toml:6:1: rule 1 "x": set.class: unknown key here: "class" belongs in [rule.match] or [rule.except]`,
				`p.toml:7:1: rule 1 "x": set.fifo_batch: unknown key here: "fifo_batch" belongs in [rule.set.iosched]`,
			},
		},
		{
			name: "wrong types",
			src: `[[rule]]
name = "x"
[rule.match]
class = 3
rotational = "yes"
hw_queues = 1.5
model = ["^a", 2]
[rule.set]
read_ahead_kb = "128"
scheduler = 1
`,
			want: []string{
				`p.toml:4:1: rule 1 "x": match.class: want a string or a list of strings, not an integer`,
				`p.toml:5:1: rule 1 "x": match.rotational: want true or false, not a string`,
				`p.toml:6:1: rule 1 "x": match.hw_queues: want an integer or a range such as { min = 2 }, not a float`,
				`p.toml:7:16: rule 1 "x": match.model: want a string, not an integer`,
				`p.toml:9:1: rule 1 "x": set.read_ahead_kb: want an integer, not a string`,
				`p.toml:10:1: rule 1 "x": set.scheduler: want a string or a list of strings, not an integer`,
			},
		},
		{
			name: "values out of range",
			src: `[[rule]]
name = "x"
[rule.set]
nomerges = 3
rq_affinity = -1
add_random = 2
iostats = 7
nr_requests = 1
read_ahead_kb = 130
wbt_lat_usec = -1
max_sectors_kb = 0
io_timeout = 0
`,
			want: []string{
				`p.toml:4:1: rule 1 "x": set.nomerges: 3 is out of range 0..2`,
				`p.toml:5:1: rule 1 "x": set.rq_affinity: -1 is out of range 0..2`,
				`p.toml:6:1: rule 1 "x": set.add_random: 2 is out of range 0..1`,
				`p.toml:7:1: rule 1 "x": set.iostats: 7 is out of range 0..1`,
				`p.toml:8:1: rule 1 "x": set.nr_requests: 1 is out of range 4..4294967295: the kernel raises smaller values to 4 (BLKDEV_MIN_RQ)`,
				`p.toml:9:1: rule 1 "x": set.read_ahead_kb: 130 is not a multiple of 4: the kernel keeps whole 4 KiB pages`,
				`p.toml:10:1: rule 1 "x": set.wbt_lat_usec: -1 is out of range 0..9223372036854775: -1 (restore the default) reads back as the default's value, so iosched could never see it in place: write the value itself`,
				`p.toml:11:1: rule 1 "x": set.max_sectors_kb: 0 is out of range 4..4294967295: 0 (restore the default) reads back as the default's value, and less than one page is refused by the kernel`,
				`p.toml:12:1: rule 1 "x": set.io_timeout: 0 is out of range 1..4294967295: milliseconds; the kernel refuses 0`,
			},
		},
		{
			name: "unknown class",
			src:  "[[rule]]\nname = \"x\"\n[rule.match]\nclass = [\"nvme\", \"virtioo\", \"floppy\"]\n",
			want: []string{
				`p.toml:4:18: rule 1 "x": match.class: "virtioo" is not a class; did you mean "virtio"? (classes: virtio, nvme, scsi, mmc, loop, ram, zram, ublk, nbd, dm, md, xen, rbd, pmem, unknown)`,
				`p.toml:4:29: rule 1 "x": match.class: "floppy" is not a class (classes: virtio, nvme, scsi, mmc, loop, ram, zram, ublk, nbd, dm, md, xen, rbd, pmem, unknown)`,
			},
		},
		{
			name: "invalid globs and regular expressions",
			src: `[[rule]]
name = "x"
[rule.match]
name = "loop[7"
model = "QEMU("
serial = ["ok", "a**(?"]
property = { ID_BUS = "[", "BAD NAME" = "x" }
`,
			want: []string{
				`p.toml:4:1: rule 1 "x": match.name: invalid glob "loop[7": syntax error in pattern`,
				"p.toml:5:1: rule 1 \"x\": match.model: invalid regular expression \"QEMU(\": error parsing regexp: missing closing ): `QEMU(`",
				"p.toml:6:17: rule 1 \"x\": match.serial: invalid regular expression \"a**(?\": error parsing regexp: invalid nested repetition operator: `**`",
				`p.toml:7:14: rule 1 "x": match.property.ID_BUS: invalid glob "[": syntax error in pattern`,
				`p.toml:7:28: rule 1 "x": match.property."BAD NAME": "BAD NAME" is not a udev property name (letters, digits, '_' and '.')`,
			},
		},
		{
			name: "scheduler names",
			src:  "[[rule]]\nname = \"x\"\n[rule.set]\nscheduler = [\"deadline\", \"kyberr\", \"Fancy\", \"none\", \"none\", \"a-very-long-scheduler\"]\n",
			want: []string{
				`p.toml:4:14: rule 1 "x": set.scheduler: "deadline" was removed in Linux 5.0 with the legacy block layer; use "mq-deadline"`,
				`p.toml:4:26: rule 1 "x": set.scheduler: "kyberr" is not a kernel scheduler; did you mean "kyber"?`,
				`p.toml:4:36: rule 1 "x": set.scheduler: "Fancy" is not a plausible scheduler name (lower-case letters, digits, '-' and '_', at most 15 characters)`,
				`p.toml:4:53: rule 1 "x": set.scheduler: "none" is listed twice`,
				`p.toml:4:61: rule 1 "x": set.scheduler: "a-very-long-scheduler" is not a plausible scheduler name (lower-case letters, digits, '-' and '_', at most 15 characters)`,
			},
		},
		{
			name: "no path can be smuggled in",
			src: `[[rule]]
name = "x"
[rule.set]
"../../../etc/passwd" = 1
"queue/scheduler" = "none"
[rule.set.iosched]
"../scheduler" = 1
"nr_requests" = 4
fifo_batc = 16
slice_idle = -5
`,
			want: []string{
				`p.toml:4:1: rule 1 "x": set."../../../etc/passwd": unknown key (valid: scheduler, read_ahead_kb, nr_requests, nomerges, rq_affinity, add_random, iostats, wbt_lat_usec, max_sectors_kb, io_timeout, iosched)`,
				`p.toml:5:1: rule 1 "x": set."queue/scheduler": unknown key (valid: scheduler, read_ahead_kb, nr_requests, nomerges, rq_affinity, add_random, iostats, wbt_lat_usec, max_sectors_kb, io_timeout, iosched)`,
				`p.toml:7:1: rule 1 "x": set.iosched."../scheduler": "../scheduler" is not a scheduler parameter name (lower-case letters, digits and '_')`,
				`p.toml:8:1: rule 1 "x": set.iosched.nr_requests: "nr_requests" is a queue setting, not a scheduler parameter: it belongs in [rule.set]`,
				`p.toml:9:1: rule 1 "x": set.iosched.fifo_batc: unknown scheduler parameter; did you mean "fifo_batch"?`,
				`p.toml:10:1: rule 1 "x": set.iosched.slice_idle: -5 is negative: no scheduler parameter takes a negative value`,
			},
		},
		{
			name: "parameters for no scheduler",
			src:  "[[rule]]\nname = \"x\"\n[rule.set]\nscheduler = [\"none\"]\n[rule.set.iosched]\nfifo_batch = 8\n[[rule]]\nname = \"y\"\n[rule.set]\nscheduler = [\"none\", \"mq-deadline\"]\niosched = { fifo_batch = 8 }\n",
			want: []string{`p.toml:5:1: rule 1 "x": set.iosched: scheduler none has no parameters`},
		},
		{
			name: "parameters none of the rule's schedulers has, and out of range",
			src:  "[[rule]]\nname = \"x\"\n[rule.set]\nscheduler = [\"bfq\", \"kyber\"]\n[rule.set.iosched]\nfifo_batch = 8\nslice_idle = 0\n[[rule]]\nname = \"y\"\n[rule.set.iosched]\nfifo_batch = 4294967296\nread_lat_nsec = 4294967296\n",
			want: []string{
				`p.toml:6:1: rule 1 "x": set.iosched.fifo_batch: fifo_batch is not a parameter of bfq or kyber`,
				`p.toml:11:1: rule 2 "y": set.iosched.fifo_batch: 4294967296 is out of range 0..2147483647`,
			},
		},
		{
			name: "a byte-order mark keeps positions right",
			src:  "\xef\xbb\xbf[[rule]]\nname = \"x\"\n[rule.set]\nnomerges = 3\n",
			want: []string{`p.toml:4:1: rule 1 "x": set.nomerges: 3 is out of range 0..2`},
		},
		{
			name: "duplicate, missing and bad names",
			src: `[[rule]]
name = "same"

[[rule]]
name = "same"

[[rule]]
[rule.set]
scheduler = "none"

[[rule]]
name = ""
`,
			want: []string{
				`p.toml:5:1: rule 2 "same": name: "same" is already the name of rule 1 "same" (p.toml:1)`,
				`p.toml:7:1: rule 3: name: missing: every rule needs a unique name`,
				`p.toml:12:1: rule 4: name: must not be empty`,
			},
		},
		{
			name: "rule as a plain table",
			src:  "[rule]\nname = \"x\"\n",
			want: []string{`p.toml:1:1: rule: each rule starts with [[rule]] (an array of tables), not [rule]`},
		},
		{
			name: "sizes and queue counts",
			src: `[[rule]]
name = "x"
[rule.match]
size = { min = "1GB", max = "2 lots" }
hw_queues = { min = 8, max = 2 }
[rule.except]
size = "1GiB"
hw_queues = { least = 2 }
[[rule]]
name = "y"
[rule.match]
size = { min = "2TiB", max = "1TiB" }
hw_queues = -1
`,
			want: []string{
				`p.toml:4:10: rule 1 "x": match.size.min: "1GB" is ambiguous (decimal or binary?): write "1GiB" (powers of 1024) or a byte count`,
				`p.toml:4:23: rule 1 "x": match.size.max: "2 lots" is not a size: want a whole number of bytes or with a unit: B, K or KiB, M or MiB, G or GiB, T or TiB, P or PiB (all powers of 1024)`,
				`p.toml:5:1: rule 1 "x": match.hw_queues: min 8 is above max 2`,
				`p.toml:7:1: rule 1 "x": except.size: want a range such as { min = "1GiB", max = "64TiB" }, not a string`,
				`p.toml:8:15: rule 1 "x": except.hw_queues.least: unknown key (valid: min, max)`,
				`p.toml:12:1: rule 2 "y": match.size: min 2TiB is above max 1TiB`,
				`p.toml:13:1: rule 2 "y": match.hw_queues: -1 is negative`,
			},
		},
		{
			name: "empty lists and tables",
			src: `[[rule]]
name = "x"
[rule.match]
class = []
driver = ""
size = {}
property = {}
`,
			want: []string{
				`p.toml:4:1: rule 1 "x": match.class: empty list: it would match nothing`,
				`p.toml:5:1: rule 1 "x": match.driver: empty name: it would match nothing`,
				`p.toml:6:1: rule 1 "x": match.size: empty range: give min, max or both`,
				`p.toml:7:1: rule 1 "x": match.property: empty table: name at least one udev property`,
			},
		},
		{
			name: "daemon table",
			src: `[daemon]
uevent_source = "netlink"
reconcile_interval = "5"
restore_on_exit = "no"
reconcile = "1m"
`,
			want: []string{
				`p.toml:2:1: daemon.uevent_source: "netlink" is not a uevent source: "kernel" (kernel uevents, no udevd needed) or "udev" (udevd's events, with udev properties)`,
				`p.toml:3:1: daemon.reconcile_interval: "5" is not a duration: want a number with a unit, such as "60s" or "5m", or "0" to turn reconciling off`,
				`p.toml:4:1: daemon.restore_on_exit: want true or false, not a string`,
				`p.toml:5:1: daemon.reconcile: unknown key; did you mean "reconcile_interval"?`,
			},
		},
		{
			name: "daemon intervals",
			src:  "[daemon]\nreconcile_interval = \"-5s\"\n",
			want: []string{`p.toml:2:1: daemon.reconcile_interval: -5s is negative; "0" turns reconciling off`},
		},
		{
			name: "daemon interval too short",
			src:  "[daemon]\nreconcile_interval = \"60ms\"\n",
			want: []string{`p.toml:2:1: daemon.reconcile_interval: 60ms is shorter than 100ms, the shortest interval ("0" turns reconciling off)`},
		},
		{
			name: "except of the wrong type",
			src:  "[[rule]]\nname = \"x\"\nexcept = \"loop\"\n",
			want: []string{`p.toml:3:1: rule 1 "x": except: want a table ([rule.except]) or tables ([[rule.except]]), not a string`},
		},
		{
			name: "dotted keys and inline tables have positions",
			src:  "[[rule]]\nname = \"x\"\nmatch.class = \"virtio\"\nmatch.hw_queues = { min = 1, mx = 4 }\nset = { scheduler = \"none\", nomerges = 9 }\n",
			want: []string{
				`p.toml:4:30: rule 1 "x": match.hw_queues.mx: unknown key; did you mean "max"?`,
				`p.toml:5:29: rule 1 "x": set.nomerges: 9 is out of range 0..2`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorLines(t, File{Name: "p.toml", Data: []byte(tt.src)})
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
