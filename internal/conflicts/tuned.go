package conflicts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/iosched/iosched/internal/fileio"
	"github.com/iosched/iosched/internal/sysfs"
)

// TunedActiveProfile names the profile(s) tuned applies, blank-separated.
const TunedActiveProfile = "/etc/tuned/active_profile"

// Size caps: active_profile is a line of names, a profile a few KiB of
// options.
const (
	maxActiveProfile = 64 << 10
	maxTunedFile     = 1 << 20
)

// tunedProfileDirs are where tuned looks for <name>/tuned.conf, highest
// precedence first (tuned/consts.py LOAD_DIRECTORIES, searched from the
// last by tuned/profiles/locator.py).
func tunedProfileDirs() []string {
	return []string{"/etc/tuned/profiles", "/etc/tuned", "/usr/lib/tuned/profiles", "/usr/lib/tuned"}
}

// tunedOption is one key=value of a profile, with where it was written.
type tunedOption struct {
	value string
	file  string
	line  int
}

// tunedUnit is one section ([disk], [main], or any section with type=disk).
type tunedUnit struct {
	name    string
	options map[string]tunedOption
}

// tunedProfile is one tuned.conf: its units in file order.
type tunedProfile struct {
	units []*tunedUnit
}

func (p *tunedProfile) unit(name string) *tunedUnit {
	for _, u := range p.units {
		if u.name == name {
			return u
		}
	}
	return nil
}

// tunedWrite is a [disk] option of the active profile that sets a queue
// attribute, with the devices it is for.
type tunedWrite struct {
	profile string // the active profile's name(s)
	unit    string
	devices tunedOption // "" value: every device
	udevRE  string      // devices_udev_regex, not evaluated
	attr    string
	opt     tunedOption // the option as written (elevator=bfq)
	key     string
}

// loadTuned reads the active profile and returns the queue attributes its
// disk units set. No active_profile file: no tuned profile, nothing.
func loadTuned(root string) ([]tunedWrite, []string, error) {
	b, err := fileio.Read(filepath.Join(root, TunedActiveProfile), maxActiveProfile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the active tuned profile: %w", err)
	}
	names := strings.Fields(string(b))
	if len(names) == 0 {
		return nil, nil, nil
	}
	var profiles []*tunedProfile
	var processed []string
	if err := loadTunedProfiles(root, names, &profiles, &processed); err != nil {
		return nil, nil, err
	}
	merged := mergeTuned(profiles)
	var out []tunedWrite
	var problems []string
	active := strings.Join(names, " ")
	for _, u := range merged.units {
		typ := u.name
		if t, ok := u.options["type"]; ok {
			typ = t.value
		}
		if typ != "disk" {
			continue
		}
		if e, ok := u.options["enabled"]; ok && !tunedBool(e.value) {
			continue
		}
		for _, key := range []string{"elevator", "readahead", "readahead_multiply"} {
			opt, ok := u.options[key]
			if !ok || strings.TrimSpace(opt.value) == "" {
				continue
			}
			attr := "read_ahead_kb"
			if key == "elevator" {
				attr = "scheduler"
			}
			out = append(out, tunedWrite{profile: active, unit: u.name, devices: u.options["devices"],
				udevRE: u.options["devices_udev_regex"].value, attr: attr, opt: opt, key: key})
		}
	}
	return out, problems, nil
}

// loadTunedProfiles loads each named profile after the ones it includes,
// as tuned/profiles/loader.py _load_profile does; processed holds the
// files read, so that /etc/tuned/x/tuned.conf can include "x" to extend
// the shipped /usr/lib/tuned/x.
func loadTunedProfiles(root string, names []string, out *[]*tunedProfile, processed *[]string) error {
	for _, name := range names {
		if !safeProfileName.MatchString(name) {
			continue // tuned drops such names too
		}
		path := locateTuned(root, name, *processed)
		if path == "" {
			return fmt.Errorf("tuned profile %q: no %s/tuned.conf in %s", name, name, strings.Join(tunedProfileDirs(), ", "))
		}
		*processed = append(*processed, path)
		p, err := readTunedFile(root, path)
		if err != nil {
			return err
		}
		if main := p.unit("main"); main != nil {
			if inc, ok := main.options["include"]; ok {
				delete(main.options, "include")
				var incs []string
				for _, s := range includeSep.Split(strings.TrimSpace(inc.value), -1) {
					if s != "" {
						incs = append(incs, s)
					}
				}
				if err := loadTunedProfiles(root, incs, out, processed); err != nil {
					return err
				}
			}
		}
		*out = append(*out, p)
	}
	return nil
}

// Patterns of tuned/profiles/loader.py (profile names, include= lists) and
// hardware/device_matcher.py (devices= lists); never modified.
var (
	safeProfileName = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)
	includeSep      = regexp.MustCompile(`\s*[,;]\s*`)
	devicesSep      = regexp.MustCompile(`\s|,\s*`)
)

func locateTuned(root, name string, processed []string) string {
	for _, dir := range tunedProfileDirs() {
		p := filepath.Join(dir, name, "tuned.conf")
		done := false
		for _, q := range processed {
			done = done || q == p
		}
		if done {
			continue
		}
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// readTunedFile parses a tuned.conf as tuned's ConfigParser does
// (delimiter '=', '#' and ';' comment lines, '#' inline comments, keys case
// sensitive). Options before any section are ignored.
func readTunedFile(root, path string) (*tunedProfile, error) {
	b, err := fileio.Read(filepath.Join(root, path), maxTunedFile)
	if err != nil {
		return nil, fmt.Errorf("reading tuned profile: %w", err)
	}
	p := &tunedProfile{}
	var cur *tunedUnit
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			name := strings.TrimSpace(line[1 : len(line)-1])
			if cur = p.unit(name); cur == nil {
				cur = &tunedUnit{name: name, options: map[string]tunedOption{}}
				p.units = append(p.units, cur)
			}
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || cur == nil {
			continue
		}
		if i := strings.Index(value, " #"); i >= 0 {
			value = value[:i]
		}
		cur.options[strings.TrimSpace(key)] = tunedOption{value: strings.TrimSpace(value), file: path, line: n}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading tuned profile %s: %w", path, err)
	}
	return p, nil
}

// mergeTuned merges profiles in load order as tuned/profiles/merger.py
// does: a unit of a later profile updates the same unit's options, or
// replaces the unit when it says replace=1.
func mergeTuned(profiles []*tunedProfile) *tunedProfile {
	out := &tunedProfile{}
	for _, p := range profiles {
		for _, u := range p.units {
			prev := out.unit(u.name)
			if prev == nil || tunedBool(u.options["replace"].value) {
				c := &tunedUnit{name: u.name, options: map[string]tunedOption{}}
				for k, v := range u.options {
					c.options[k] = v
				}
				if prev == nil {
					out.units = append(out.units, c)
				} else {
					*prev = *c
				}
				continue
			}
			for k, v := range u.options {
				prev.options[k] = v
			}
		}
	}
	return out
}

// tunedBool reads a boolean option as tuned does (plugins/base.py
// _option_bool): 1, true, yes, y, on are true.
func tunedBool(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "y", "on":
		return true
	}
	return false
}

// applies tells whether the unit's disk plug-in would handle d: tuned's
// disk plug-in takes only non-removable disks whose parent is SCSI,
// virtio, Xen or NVMe, or that have none (plugins/plugin_disk.py
// _device_is_supported), and then those its devices= list names
// (hardware/device_matcher.py).
func (w tunedWrite) applies(d *sysfs.Device, k Known) (verdict, []string) {
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
	if strings.Contains(w.devices.value, "${") {
		v, open = unknown, append(open, "devices="+w.devices.value)
	} else if !tunedDevicesMatch(w.devices.value, d.Name) {
		return fails, nil
	}
	if w.udevRE != "" {
		v, open = unknown, append(open, "devices_udev_regex="+w.udevRE)
	}
	return v, open
}

// tunedDevicesMatch applies a devices= list: globs separated by blanks or
// commas, "!" before the ones that exclude; no positive glob means all.
func tunedDevicesMatch(spec, name string) bool {
	var pos, neg []string
	for _, r := range devicesSep.Split(strings.TrimSpace(spec), -1) {
		switch {
		case r == "":
		case strings.HasPrefix(r, "!"):
			neg = append(neg, r[1:])
		default:
			pos = append(pos, r)
		}
	}
	if len(pos) == 0 {
		pos = []string{"*"}
	}
	ok := false
	for _, p := range pos {
		ok = ok || fnmatch(p, name)
	}
	for _, n := range neg {
		if fnmatch(n, name) {
			return false
		}
	}
	return ok
}

// tunedValue turns what a [disk] option says into the queue attribute's
// terms: the value, and how it compares (plugins/base.py
// _process_assignment_modifiers: ">N" writes N only over a lower value,
// "<N" only over a higher one).
func (w tunedWrite) value() (cmp byte, value string) {
	v := strings.TrimSpace(w.opt.value)
	if v != "" && (v[0] == '>' || v[0] == '<') {
		cmp, v = v[0], strings.TrimSpace(v[1:])
	}
	if w.key == "readahead" {
		// KiB, or 512-byte sectors with an " s" suffix (plugin_disk.py
		// _parse_ra).
		f := strings.Fields(v)
		if len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				if len(f) > 1 && strings.HasPrefix(f[1], "s") {
					n /= 2
				}
				v = strconv.Itoa(n)
			}
		}
	}
	return cmp, v
}
