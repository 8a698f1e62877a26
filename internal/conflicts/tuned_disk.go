package conflicts

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/sysfs"
)

// writesFor returns what tuned would write to disk d's queue attributes,
// in the order it writes them: its instances in priority order, the first
// [disk] instance whose devices= takes d claiming it (a later one never
// applies to d, as plugins/base.py assign_free_devices and hotplug.py
// _add_device give a disk to one instance), and every [sysfs] path that
// names one of d's queue files. When the profile was evaluated both ways
// (${f:virt_check}), a write both ways make is reported once, the others
// with the way they need.
func (c *tunedConfig) writesFor(d *sysfs.Device, k Known) []Write {
	if c == nil {
		return nil
	}
	if len(c.passes) != 2 {
		return c.passes[0].writesFor(c.profile, d, k)
	}
	type key struct {
		where, attr, value string
		cmp                byte
		unknown            string
	}
	keyOf := func(w Write, note string) key {
		return key{w.Where(), w.Attribute, w.Value, w.Compare, strings.Join(slices.DeleteFunc(slices.Clone(w.Unknown), func(s string) bool { return s == note }), "\x00")}
	}
	a := c.passes[0].writesFor(c.profile, d, k)
	b := c.passes[1].writesFor(c.profile, d, k)
	ka := make([]key, len(a))
	for i, w := range a {
		ka[i] = keyOf(w, c.passes[0].vmNote)
	}
	kb := make([]key, len(b))
	for i, w := range b {
		kb[i] = keyOf(w, c.passes[1].vmNote)
	}
	// A longest common subsequence: the writes both ways make, in an
	// order both keep. Each way's own writes go in between, so either
	// way's writes read in the order tuned makes them.
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			switch {
			case ka[i] == kb[j]:
				lcs[i][j] = lcs[i+1][j+1] + 1
			case lcs[i+1][j] >= lcs[i][j+1]:
				lcs[i][j] = lcs[i+1][j]
			default:
				lcs[i][j] = lcs[i][j+1]
			}
		}
	}
	var out []Write
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && ka[i] == kb[j]:
			w := a[i]
			w.Unknown = slices.DeleteFunc(w.Unknown, func(s string) bool { return s == c.passes[0].vmNote })
			if len(w.Unknown) == 0 {
				w.Unknown = nil
			}
			out = append(out, w)
			i, j = i+1, j+1
		case j >= m || (i < n && lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, a[i])
			i++
		default:
			out = append(out, b[j])
			j++
		}
	}
	return out
}

func (p tunedPass) writesFor(profile string, d *sysfs.Device, k Known) []Write {
	var out []Write
	supported, supportOpen := tunedDiskSupported(d, k)
	claimed := false
	var before []string // earlier [disk] instances that may have taken d
	emit := func(in *tunedInstance, w tunedWrite, attr string, cmp byte, value string, conds []string) {
		var unknown []string
		unknown = appendNew(unknown, conds...)
		unknown = appendNew(unknown, in.open...)
		unknown = appendNew(unknown, w.value.notes...)
		if p.vmNote != "" {
			unknown = append(unknown, p.vmNote)
		}
		out = append(out, Write{Kind: TunedProfile, Profile: profile, File: w.opt.file, Line: w.opt.line,
			Attribute: attr, Value: value, Compare: cmp, Unknown: unknown})
	}
	for _, in := range p.instances {
		switch in.typ {
		case "disk":
			if claimed || supported == fails {
				continue
			}
			v, open := in.takes(d)
			if v == fails {
				continue
			}
			conds := appendNew(append(slices.Clone(supportOpen), before...), open...)
			for _, w := range in.writes {
				attr, cmp, value, ok := w.diskValue()
				if ok {
					emit(in, w, attr, cmp, value, conds)
				}
			}
			if v == holds && len(in.open) == 0 {
				claimed = true
			} else {
				before = append(before, fmt.Sprintf("tuned's [%s] instance, ahead of it, does not take the disk", in.name))
			}
		case "sysfs":
			for _, w := range in.writes {
				for _, attr := range sysfsQueueAttrs(w.key, d, k) {
					emit(in, w, attr, 0, w.value.s, nil)
				}
			}
		}
	}
	return out
}

// tunedDiskSupported is plugin_disk.py _device_is_supported: tuned's disk
// plug-in takes only non-removable disks whose parent is SCSI, virtio,
// Xen or NVMe, or that have none.
func tunedDiskSupported(d *sysfs.Device, k Known) (verdict, []string) {
	v, open := holds, []string(nil)
	switch removable, present, known := k.attrValue(d, "removable"); {
	case !known:
		v, open = unknown, append(open, "the disk is not removable (tuned's disk plug-in takes only those)")
	case !present || removable != "0":
		return fails, nil // plugin_disk.py wants removable == b"0"
	}
	switch tuned := d.Class.Spec().Tuned; {
	case noParent(d), tuned == sysfs.TunedTakes:
	case tuned == sysfs.TunedRefuses:
		return fails, nil
	default:
		v, open = unknown, append(open, "the disk's parent is SCSI, virtio, Xen or NVMe (tuned's disk plug-in takes only those)")
	}
	return v, open
}

// takes tells whether the instance's devices= (or devices_udev_regex=,
// which needs udev's database) names d.
func (in *tunedInstance) takes(d *sysfs.Device) (verdict, []string) {
	v, open := holds, []string(nil)
	if len(in.devices.notes) > 0 {
		v, open = unknown, append(open, "devices="+in.devices.s)
	} else if in.udevRE == "" && !tunedDevicesMatch(in.devices.s, d.Name) {
		return fails, nil
	}
	if in.udevRE != "" {
		// base.py: with devices_udev_regex, devices= is not used.
		v, open = unknown, append(open, "devices_udev_regex="+in.udevRE)
	}
	return v, open
}

// tunedDevicesMatch is hardware/device_matcher.py match: rules separated
// by a blank or a comma, "!" before the ones that exclude; no positive
// rule means all.
func tunedDevicesMatch(spec, name string) bool {
	var pos, neg []string
	for _, r := range devicesSep.Split(spec, -1) {
		switch {
		case strings.HasPrefix(r, "!"):
			neg = append(neg, r[1:])
		case strings.TrimSpace(r) == "":
		default:
			pos = append(pos, r)
		}
	}
	if len(pos) == 0 {
		pos = []string{"*"}
	}
	ok := false
	for _, p := range pos {
		ok = ok || pyFnmatch(p, name)
	}
	for _, n := range neg {
		if pyFnmatch(n, name) {
			return false
		}
	}
	return ok
}

// pyFnmatch is Python's fnmatch.fnmatch on Linux: like fnmatch(3) but a
// backslash is an ordinary character.
func pyFnmatch(p, s string) bool {
	return fnmatch(strings.ReplaceAll(p, `\`, `\\`), s)
}

// diskValue turns a [disk] option into the queue attribute's terms, as the
// disk plug-in writes it: base.py _process_assignment_modifiers (">N"
// writes N only over a lower value, "<N" only over a higher one, when N
// is a number), then plugin_disk.py (readahead in KiB, or 512-byte
// sectors with an "s" word after it; readahead_multiply scales the value).
// A value the plug-in cannot write (blank, not a number) is no write.
func (w tunedWrite) diskValue() (attr string, cmp byte, value string, ok bool) {
	v := w.value.s
	if v == "" {
		return "", 0, "", false
	}
	if len(v) > 1 && (v[0] == '>' || v[0] == '<') {
		if _, err := pyInt(v[1:]); err == nil {
			cmp, v = v[0], strings.TrimSpace(v[1:])
		}
	}
	switch w.key {
	case "elevator":
		if cmp == 0 && (v[0] == '>' || v[0] == '<') && len(v) > 1 {
			return "", 0, "", false // written as is: no scheduler's name
		}
		return "scheduler", cmp, v, true
	case "readahead":
		f := strings.Fields(v)
		if len(f) == 0 {
			return "", 0, "", false
		}
		n, err := pyInt(f[0])
		if err != nil {
			return "", 0, "", false
		}
		if len(f) > 1 && strings.HasPrefix(f[1], "s") {
			n /= 2 // "%d" % (n / 2): truncated
		}
		return "read_ahead_kb", cmp, strconv.FormatInt(n, 10), true
	case "readahead_multiply":
		if _, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || cmp != 0 {
			return "", 0, "", false
		}
		return "read_ahead_kb", '*', strings.TrimSpace(v), true
	}
	return "", 0, "", false
}

// sysfsQueueAttrs tells which of d's queue attributes a [sysfs] path
// names, as plugin_sysfs.py's glob.iglob would find them: through
// /sys/block, /sys/class/block, /sys/dev/block or the disk's own
// directory, each part matched as glob matches a name (no hidden names
// for a wildcard). A wildcard among the queue's files is matched against
// the files the snapshot knows.
func sysfsQueueAttrs(pattern string, d *sysfs.Device, k Known) []string {
	if !strings.HasPrefix(pattern, "/sys/") {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(pattern, "/sys/"), "/")
	dirs := [][]string{{"block", d.Name}, {"class", "block", d.Name}}
	if d.MajorMinor != "" {
		dirs = append(dirs, []string{"dev", "block", d.MajorMinor})
	}
	if d.Path != "" {
		dirs = append(dirs, strings.Split(path.Clean(d.Path), "/"))
	}
	for _, dir := range dirs {
		if len(parts) <= len(dir) {
			continue
		}
		match := true
		for i, seg := range dir {
			if !globSegment(parts[i], seg) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		rest := parts[len(dir):]
		var out []string
		for _, rel := range queueFiles(d, rest) {
			attr, ok := queueAttr(rel)
			if !ok {
				continue
			}
			// glob finds only files that exist.
			if _, present, known := k.attrValue(d, rel); known && !present {
				continue
			}
			out = append(out, attr)
		}
		// The first directory that matches is the one glob walked; the
		// others name the same files.
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// queueFiles are the files below the disk's directory that pattern parts
// name: the parts themselves when they hold no wildcard, else the queue
// files the snapshot knows that match, sorted.
func queueFiles(d *sysfs.Device, parts []string) []string {
	if !strings.ContainsAny(strings.Join(parts, "/"), "*?[") {
		return []string{strings.Join(parts, "/")}
	}
	known := []string{"bdi/read_ahead_kb"}
	if d.Scheduler != nil {
		known = append(known, "queue/scheduler")
	}
	for name := range d.Tunables {
		known = append(known, "queue/"+name)
	}
	slices.Sort(known)
	var out []string
	for _, rel := range known {
		segs := strings.Split(rel, "/")
		if len(segs) != len(parts) {
			continue
		}
		ok := true
		for i := range segs {
			ok = ok && globSegment(parts[i], segs[i])
		}
		if ok {
			out = append(out, rel)
		}
	}
	return out
}

// globSegment matches one path part as Python's glob does: a part without
// wildcards is the name itself, one with them is fnmatch that does not
// match a hidden name unless the pattern starts with '.'.
func globSegment(pat, name string) bool {
	if !strings.ContainsAny(pat, "*?[") {
		return pat == name
	}
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pat, ".") {
		return false
	}
	return pyFnmatch(pat, name)
}

var devicesSep = regexp.MustCompile(`\s|,\s*`)

// empty reports whether no instance writes a queue attribute.
func (c *tunedConfig) empty() bool {
	if c == nil {
		return true
	}
	for _, p := range c.passes {
		for _, in := range p.instances {
			if len(in.writes) > 0 {
				return false
			}
		}
	}
	return true
}
