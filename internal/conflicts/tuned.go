package conflicts

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iosched/iosched/internal/fileio"
)

// The files tuned 2.20 reads at its start to know which profiles to
// apply (tuned/consts.py).
const (
	// TunedActiveProfile names the profile(s) tuned applies,
	// blank-separated.
	TunedActiveProfile = "/etc/tuned/active_profile"
	// TunedPostLoadedProfile names one profile tuned loads after them.
	TunedPostLoadedProfile = "/etc/tuned/post_loaded_profile"
	// tunedProfileMode says "auto" when tuned applies the profile its
	// recommend.d rules pick instead of active_profile.
	tunedProfileMode = "/etc/tuned/profile_mode"
	// tunedMainConf is tuned's own settings (utils/global_config.py).
	tunedMainConf = "/etc/tuned/tuned-main.conf"
)

// Size caps: active_profile is a line of names, a profile a few KiB of
// options.
const (
	maxActiveProfile = 64 << 10
	maxTunedFile     = 1 << 20
)

// tunedProfileDirs are where tuned 2.20 looks for <name>/tuned.conf, in
// the order it looks (tuned/consts.py LOAD_DIRECTORIES, searched from the
// last by tuned/profiles/locator.py get_config).
func tunedProfileDirs() []string { return []string{"/etc/tuned", "/usr/lib/tuned"} }

// tunedProfile is one tuned.conf: its [main] options and its other
// sections, as units, in file order.
type tunedProfile struct {
	main  *tunedSection
	units []*tunedUnit
}

// tunedUnit is a section of a profile as tuned/profiles/unit.py reads it:
// the keys it takes for itself, and the plug-in's options.
type tunedUnit struct {
	name, typ        string
	enabled, replace bool
	drop             []string // nil: no drop=
	devices          tunedOption
	udevRE           *tunedOption
	cpuinfoRE        *tunedOption
	unameRE          *tunedOption
	opts             *tunedSection
}

func newTunedUnit(s *tunedSection) *tunedUnit {
	opts := &tunedSection{name: s.name, opts: map[string]tunedOption{}}
	for _, k := range s.keys {
		opts.set(k, s.opts[k])
	}
	pop := func(k string) (tunedOption, bool) {
		o, ok := opts.opts[k]
		if ok {
			delete(opts.opts, k)
			opts.keys = removeString(opts.keys, k)
		}
		return o, ok
	}
	popPtr := func(k string) *tunedOption {
		if o, ok := pop(k); ok {
			return &o
		}
		return nil
	}
	u := &tunedUnit{name: s.name, typ: s.name, enabled: true, devices: tunedOption{value: "*"}}
	if o, ok := pop("type"); ok {
		u.typ = o.value
	}
	// Unit.__init__ compares with [True, "True", "true", 1, "1"]: "yes"
	// or "on" is false here.
	if o, ok := pop("enabled"); ok {
		u.enabled = pyTrue(o.value)
	}
	if o, ok := pop("replace"); ok {
		u.replace = pyTrue(o.value)
	}
	if o, ok := pop("drop"); ok {
		u.drop = dropSep.Split(o.value, -1)
	}
	if o, ok := pop("devices"); ok {
		u.devices = o
	}
	u.udevRE = popPtr("devices_udev_regex")
	u.cpuinfoRE = popPtr("cpuinfo_regex")
	u.unameRE = popPtr("uname_regex")
	pop("script_pre")
	pop("script_post")
	u.opts = opts
	return u
}

func pyTrue(s string) bool { return s == "True" || s == "true" || s == "1" }

func (p *tunedProfile) unit(name string) *tunedUnit {
	for _, u := range p.units {
		if u.name == name {
			return u
		}
	}
	return nil
}

// Patterns of tuned 2.20 (loader.py profile names and include= lists,
// unit.py drop= lists); never modified.
var (
	safeProfileName = regexp.MustCompile(`^[a-zA-Z0-9_.-]+$`)
	includeSep      = regexp.MustCompile(`\s*[,;]\s*`)
	dropSep         = regexp.MustCompile(`\b\s*[,;]\s*`)
)

// tunedConfig is what the active profile sets up, in tuned's order of
// instances; one pass for each way tuned could evaluate what is not known
// here (${f:virt_check}).
type tunedConfig struct {
	profile string // the profiles' names as tuned names the merged one
	passes  []tunedPass
}

// tunedPass is the instances of one way of evaluating the profile.
type tunedPass struct {
	vmNote    string // the way ${f:virt_check} went; "" when there is one pass
	instances []*tunedInstance
}

// tunedInstance is a plug-in instance tuned would create, after its
// priority sort: a [disk] or [sysfs] unit (by type=) that is enabled.
type tunedInstance struct {
	name, typ string
	devices   tunedText
	udevRE    string // "": none
	open      []string
	writes    []tunedWrite
}

// tunedWrite is one option of an instance that writes a queue attribute:
// a [disk] option, or a [sysfs] path.
type tunedWrite struct {
	key   string // the option: elevator, readahead, readahead_multiply, or the sysfs path
	opt   tunedOption
	value tunedText // expanded as tuned expands it when it applies it
}

// loadTuned reads what tuned would apply at its start. No active_profile
// and no post_loaded_profile: nothing. An error means tuned would apply no
// profile at all.
func loadTuned(root string) (*tunedConfig, []string, error) {
	read := func(p string) (string, bool, error) {
		b, err := fileio.Read(filepath.Join(root, p), maxActiveProfile)
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("reading tuned's %s: %w", p, err)
		}
		return strings.TrimSpace(string(b)), true, nil
	}
	mode, _, err := read(tunedProfileMode)
	if err != nil {
		return nil, nil, err
	}
	active, hasActive, err := read(TunedActiveProfile)
	if err != nil {
		return nil, nil, err
	}
	post, _, err := read(TunedPostLoadedProfile)
	if err != nil {
		return nil, nil, err
	}
	// daemon.py _get_startup_profile: in auto mode, and with no mode and
	// no active profile, tuned asks its recommender, which runs commands
	// and reads the machine.
	recommended := fmt.Sprintf("if tuned runs, it applies the profile its recommend.d rules pick (%s says auto, or neither it nor %s names one); that profile is not read here", tunedProfileMode, TunedActiveProfile)
	switch mode {
	case "manual":
	case "":
		if hasActive && active == "" {
			return nil, []string{recommended}, nil
		}
	case "auto":
		return nil, []string{recommended}, nil
	default:
		return nil, nil, fmt.Errorf("%s: %q is neither auto nor manual; tuned applies no profile", tunedProfileMode, mode)
	}
	if strings.ContainsAny(post, " \t\n\r\v\f") {
		return nil, nil, fmt.Errorf("%s names more than one profile (%q); tuned applies no profile", TunedPostLoadedProfile, post)
	}
	names := strings.Fields(active)
	if post != "" {
		names = append(names, post)
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	// daemon.py _load_profiles: every name must be a profile directory.
	for _, n := range names {
		if !tunedKnown(root, n) {
			var dirs []string
			for _, d := range tunedProfileDirs() {
				dirs = append(dirs, d+"/"+n+"/tuned.conf")
			}
			return nil, nil, fmt.Errorf("tuned profile %q: no %s/tuned.conf in %s, so tuned applies no profile", n, n, strings.Join(dirs, " or "))
		}
	}
	var safe []string
	for _, n := range names {
		if safeProfileName.MatchString(n) {
			safe = append(safe, n)
		}
	}
	if len(safe) == 0 {
		return nil, nil, fmt.Errorf("tuned profiles %q: no name tuned accepts", names)
	}
	settings, err := readTunedMain(root)
	if err != nil {
		return nil, nil, err
	}
	// loader.py names the merged profile by the names it loaded.
	cfg := &tunedConfig{profile: strings.Join(safe, " ")}
	var problems []string
	for _, vm := range []bool{false, true} {
		vars := &tunedVars{vm: vm}
		pass, probs, err := loadTunedPass(root, safe, vars, settings)
		if err != nil {
			return nil, nil, err
		}
		problems = appendNew(problems, probs...)
		if vars.virtSeen != "" {
			not := "not "
			if vm {
				not = ""
			}
			pass.vmNote = fmt.Sprintf("the machine is %sa virtual machine (tuned would evaluate %s by running virt-what; both branches are reported)", not, vars.virtSeen)
		}
		cfg.passes = append(cfg.passes, pass)
		if vars.virtSeen == "" {
			break
		}
	}
	return cfg, problems, nil
}

// tunedKnown is locator.py list_profiles: a directory of that name holding
// a tuned.conf regular file, in either directory.
func tunedKnown(root, name string) bool {
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return false
	}
	for _, d := range tunedProfileDirs() {
		if st, err := os.Stat(filepath.Join(root, d, name, "tuned.conf")); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// loadTunedPass is loader.py load and units/manager.py create for one way
// of evaluating ${f:virt_check}.
func loadTunedPass(root string, names []string, vars *tunedVars, settings tunedSettings) (tunedPass, []string, error) {
	var profiles []*tunedProfile
	var processed []string
	if err := loadTunedProfiles(root, names, &profiles, &processed, vars); err != nil {
		return tunedPass{}, nil, err
	}
	merged := mergeTuned(profiles)
	var problems []string
	if u := merged.unit("variables"); u != nil {
		for _, k := range u.opts.keys {
			o := u.opts.opts[k]
			if k == "include" {
				p, err := readTunedVariables(root, o, vars)
				if err != nil {
					return tunedPass{}, nil, err
				}
				problems = append(problems, p...)
				continue
			}
			if err := vars.add(k, o); err != nil {
				return tunedPass{}, nil, err
			}
		}
		merged.units = removeUnit(merged.units, "variables")
	}
	type sorted struct {
		in       *tunedInstance
		priority int64
	}
	var list []sorted
	cpuinfo, cpuinfoErr := []byte(settings.cpuinfo), error(nil)
	if !settings.hasCPUInfo {
		cpuinfo, cpuinfoErr = fileio.Read(filepath.Join(root, "/proc/cpuinfo"), maxTunedFile)
	}
	uname := func() (string, bool) {
		if settings.hasUname {
			return settings.uname, true
		}
		return unameString(root)
	}
	for _, u := range merged.units {
		if !u.enabled {
			continue
		}
		in := &tunedInstance{name: u.name, typ: u.typ}
		skip := false
		for _, c := range []struct {
			opt  *tunedOption
			what string
			text func() (string, bool)
		}{
			{u.cpuinfoRE, "/proc/cpuinfo", func() (string, bool) { return string(cpuinfo), cpuinfoErr == nil }},
			{u.unameRE, "uname", uname},
		} {
			if c.opt == nil {
				continue
			}
			re, err := vars.expand(c.opt.value, *c.opt)
			if err != nil {
				return tunedPass{}, nil, err
			}
			cre, cerr := regexp.Compile("(?m)" + re.s)
			text, ok := c.text()
			switch {
			case cerr == nil && ok && !cre.MatchString(text):
				skip = true // manager.py: the instance is skipped
			case cerr == nil && ok:
			default:
				in.open = append(in.open, fmt.Sprintf("%s matches %s=%q (%s:%d)", c.what, strings.TrimSuffix(path.Base(c.what), "info")+"_regex", re.s, c.opt.file, c.opt.line))
			}
		}
		if skip {
			continue
		}
		prio := settings.priority
		if o, ok := u.opts.opts["priority"]; ok {
			n, err := pyInt(o.value)
			if err != nil {
				return tunedPass{}, nil, fmt.Errorf("%s:%d: priority=%q is not a number; tuned's unit manager fails on it and applies nothing", o.file, o.line, o.value)
			}
			prio = n
		}
		if u.typ != "disk" && u.typ != "sysfs" {
			continue // no queue attribute
		}
		dev, err := vars.expand(u.devices.value, u.devices)
		if err != nil {
			return tunedPass{}, nil, err
		}
		in.devices = dev
		if u.udevRE != nil {
			in.udevRE = u.udevRE.value
		}
		if in.writes, err = instanceWrites(u, vars); err != nil {
			return tunedPass{}, nil, err
		}
		list = append(list, sorted{in, prio})
	}
	// manager.py sorts the instances by priority with Python's stable
	// sort: equal priorities keep the merged profile's unit order.
	slices.SortStableFunc(list, func(a, b sorted) int { return cmp.Compare(a.priority, b.priority) })
	p := tunedPass{}
	for _, s := range list {
		p.instances = append(p.instances, s.in)
	}
	return p, problems, nil
}

// tunedSettings are the tuned-main.conf settings that decide which
// instances tuned creates and in which order.
type tunedSettings struct {
	priority             int64 // default_instance_priority
	cpuinfo, uname       string
	hasCPUInfo, hasUname bool
}

// readTunedMain reads tuned-main.conf as global_config.py does: key=value
// lines with no section header (a later [section] is none of tuned's).
// No file: tuned's defaults.
func readTunedMain(root string) (tunedSettings, error) {
	var st tunedSettings
	b, err := fileio.Read(filepath.Join(root, tunedMainConf), maxTunedFile)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading tuned's settings: %w", err)
	}
	secs, err := parseTunedConf(tunedMainConf, "[tuned-main]\n"+string(b), false, 0)
	if err != nil {
		return st, fmt.Errorf("tuned does not start: %w", err)
	}
	opts := secs[0].opts
	if o, ok := opts["default_instance_priority"]; ok {
		// application.py: int() of ConfigParser.getint's value.
		n, err := pyInt(o.value)
		if err != nil {
			return st, fmt.Errorf("%s:%d: default_instance_priority=%q is not a number; tuned does not start", o.file, o.line, o.value)
		}
		st.priority = n
	}
	if o, ok := opts["cpuinfo_string"]; ok {
		st.cpuinfo, st.hasCPUInfo = o.value, true
	}
	if o, ok := opts["uname_string"]; ok {
		st.uname, st.hasUname = o.value, true
	}
	return st, nil
}

func removeUnit(units []*tunedUnit, name string) []*tunedUnit {
	out := units[:0]
	for _, u := range units {
		if u.name != name {
			out = append(out, u)
		}
	}
	return out
}

// unameString is " ".join(os.uname()), known only for the running
// machine's own root.
func unameString(root string) (string, bool) {
	if filepath.Clean(root) != "/" {
		return "", false
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", false
	}
	return strings.Join([]string{unix.ByteSliceToString(u.Sysname[:]), unix.ByteSliceToString(u.Nodename[:]),
		unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), unix.ByteSliceToString(u.Machine[:])}, " "), true
}

// The [disk] options that write a queue attribute, in the order the disk
// plug-in runs its commands (plugin_disk.py, by definition order).
// scheduler_quantum writes queue/iosched/quantum, which only the removed
// CFQ scheduler had: no write of it takes on a blk-mq disk.
var tunedDiskKeys = []string{"elevator", "readahead", "readahead_multiply"}

// instanceWrites lists what an instance writes: for [disk] its queue
// options, for [sysfs] every path (normalized as os.path.normpath does;
// a later path that normalizes to an earlier one replaces its value).
func instanceWrites(u *tunedUnit, vars *tunedVars) ([]tunedWrite, error) {
	var out []tunedWrite
	add := func(key string, o tunedOption) error {
		v, err := vars.expand(o.value, o)
		if err != nil {
			return err
		}
		for i := range out {
			if out[i].key == key {
				out[i].opt, out[i].value = o, v
				return nil
			}
		}
		out = append(out, tunedWrite{key: key, opt: o, value: v})
		return nil
	}
	switch u.typ {
	case "disk":
		for _, k := range tunedDiskKeys {
			if o, ok := u.opts.opts[k]; ok {
				if err := add(k, o); err != nil {
					return nil, err
				}
			}
		}
	case "sysfs":
		for _, k := range u.opts.keys {
			if k == "priority" {
				continue
			}
			if err := add(path.Clean(k), u.opts.opts[k]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// loadTunedProfiles is loader.py _load_profile: each named profile after
// the ones its include= names (expanded with the variables known so far,
// which at tuned's start are none: functions only). processed holds the
// files read, so /etc/tuned/x/tuned.conf can include "x" to extend the
// shipped /usr/lib/tuned/x, and a profile included twice is read once.
func loadTunedProfiles(root string, names []string, out *[]*tunedProfile, processed *[]string, vars *tunedVars) error {
	for _, name := range names {
		file, err := locateTuned(root, name, *processed)
		if err != nil {
			return err
		}
		if file == "" {
			continue
		}
		*processed = append(*processed, file)
		p, err := readTunedProfile(root, file)
		if err != nil {
			return err
		}
		if inc, ok := p.main.opts["include"]; ok {
			delete(p.main.opts, "include")
			p.main.keys = removeString(p.main.keys, "include")
			t, err := vars.expand(inc.value, inc)
			if err != nil {
				return err
			}
			if len(t.notes) > 0 && !strings.Contains(inc.value, "virt_check") {
				return fmt.Errorf("%s:%d: include=%s: %s; the profiles it names are not known here", inc.file, inc.line, inc.value, strings.Join(t.notes, "; "))
			}
			if err := loadTunedProfiles(root, includeSep.Split(t.s, -1), out, processed, vars); err != nil {
				return fmt.Errorf("%w (included from %s:%d)", err, inc.file, inc.line)
			}
		}
		*out = append(*out, p)
	}
	return nil
}

// locateTuned is locator.py get_config: the first <dir>/<name>/tuned.conf
// that is a file, /etc/tuned first. A file already read is passed over
// and, if no other is found, the name is skipped (""), as is a missing
// profile named with a leading '-' (a conditional include). A missing
// profile otherwise fails the whole load.
func locateTuned(root, name string, processed []string) (string, error) {
	conditional := strings.HasPrefix(name, "-")
	base := path.Base("/" + strings.TrimPrefix(name, "-"))
	if strings.HasSuffix(name, "/") || strings.TrimPrefix(name, "-") == "" {
		base = ""
	}
	skipped := false
	for _, dir := range tunedProfileDirs() {
		p := path.Clean(path.Join(dir, base, "tuned.conf"))
		if slices.Contains(processed, p) {
			skipped = true
			continue
		}
		if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	if skipped || conditional {
		return "", nil
	}
	return "", fmt.Errorf("tuned profile %q: no %s/tuned.conf in %s, so tuned applies no profile", name, base, strings.Join(tunedProfileDirs(), ", "))
}

// readTunedProfile reads a profile file as loader.py _load_config_data
// and profile.py do: [main] is the profile's options, the other sections
// its units; ${i:PROFILE_DIR} is the file's directory.
func readTunedProfile(root, file string) (*tunedProfile, error) {
	b, err := fileio.Read(filepath.Join(root, file), maxTunedFile)
	if err != nil {
		return nil, fmt.Errorf("reading tuned profile: %w", err)
	}
	sections, err := parseTunedConf(file, string(b), false, 1)
	if err != nil {
		return nil, fmt.Errorf("tuned profile %s: %w", file, err)
	}
	p := &tunedProfile{main: &tunedSection{name: "main", opts: map[string]tunedOption{}}}
	dir := path.Dir(file)
	for _, s := range sections {
		for k, o := range s.opts {
			o.value = expandProfileDir(dir, o.value)
			s.opts[k] = o
		}
		if s.name == "main" {
			p.main = s
			continue
		}
		p.units = append(p.units, newTunedUnit(s))
	}
	return p, nil
}

// readTunedVariables is variables.py add_from_file: the [variables]
// include= file (a path on the machine), read as key=value lines with no
// section header needed. A file tuned cannot read or parse adds nothing
// (tuned logs it and goes on).
func readTunedVariables(root string, inc tunedOption, vars *tunedVars) ([]string, error) {
	file := path.Clean(inc.value)
	b, err := fileio.Read(filepath.Join(root, file), maxTunedFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return []string{fmt.Sprintf("%s:%d: tuned's variables file %s cannot be read here: %v", inc.file, inc.line, file, err)}, nil
	}
	sections, err := parseTunedConf(file, "[variables]\n"+string(b), true, 0)
	if err != nil {
		return nil, nil // tuned: "error parsing variables_file", nothing added
	}
	for _, s := range sections {
		for _, k := range s.keys {
			if err := vars.add(k, s.opts[k]); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// mergeTuned is merger.py: profiles merged in load order. A later unit of
// the same name replaces the earlier one when it says replace=, else
// takes over its type, enabled and devices (devices= left out is "*": a
// child's [disk] without devices= is for every disk again), the regexes
// and scripts it sets, drops the options drop= names, and updates the
// options.
func mergeTuned(profiles []*tunedProfile) *tunedProfile {
	if len(profiles) == 1 {
		return profiles[0]
	}
	out := profiles[0]
	for _, p := range profiles[1:] {
		for _, k := range p.main.keys {
			out.main.set(k, p.main.opts[k])
		}
		for _, u := range p.units {
			prev := out.unit(u.name)
			switch {
			case prev == nil:
				out.units = append(out.units, u)
			case u.replace:
				*prev = *u
			default:
				prev.typ, prev.enabled, prev.devices = u.typ, u.enabled, u.devices
				for _, r := range []struct{ dst, src **tunedOption }{{&prev.udevRE, &u.udevRE}, {&prev.cpuinfoRE, &u.cpuinfoRE}, {&prev.unameRE, &u.unameRE}} {
					if *r.src != nil {
						*r.dst = *r.src
					}
				}
				if u.drop != nil {
					for _, d := range u.drop {
						if _, ok := prev.opts.opts[d]; ok {
							delete(prev.opts.opts, d)
							prev.opts.keys = removeString(prev.opts.keys, d)
						}
					}
					u.drop = nil
				}
				for _, k := range u.opts.keys {
					prev.opts.set(k, u.opts.opts[k])
				}
			}
		}
	}
	return out
}
