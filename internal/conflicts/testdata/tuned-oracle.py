#!/usr/bin/python3
"""What tuned 2.20 would write to each disk's queue attributes at its start,
computed by tuned's own code, for conflicts' differential test.

Reads a JSON request on stdin:
  {"root": DIR, "vm": BOOL,
   "disks": [{"name": "vda", "path": "devices/.../block/vda", "dev": "252:0",
              "parent": "virtio" or null, "removable": "0",
              "attrs": ["scheduler", "read_ahead_kb", ...]}]}
and prints {"profile": NAME, "error": TEXT, "writes": {DISK: [WRITE...]}},
each WRITE {"file", "line", "attr", "value", "cmp"} in the order tuned writes.

tuned's daemon: its startup profile choice (active_profile, profile_mode,
post_loaded_profile; daemon/daemon.py), its locator, loader, merger and
variable and function expansion (profiles/), its unit filters
(units/manager.py), device matcher (hardware/device_matcher.py), disk
support test, commands and value modifiers (plugins/base.py,
plugin_disk.py) and sysfs plug-in's path handling and glob (plugin_sysfs.py)
all run as tuned runs them. Nothing is started, nothing is written under
/sys: profiles are read under ROOT, sysfs paths are globbed in a tree of
empty files made for the request. What this script does itself, where tuned
would touch the machine:
- functions whose value depends on the machine or that run commands return
  no value (tuned's own behaviour when a function fails: the text stays as
  written); ${f:virt_check} returns its first argument when "vm" is true,
  else its second;
- the unit manager's sort and the disk plug-in's claiming are tuned's
  (manager.py create, base.py assign_free_devices) over the request's disks,
  restated here because their classes need udev;
- each option's file and line are found by reading its file.
"""

import collections
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import types

import tuned.consts as consts
import tuned.logs
import tuned.profiles.functions.repository as func_repo
import tuned.profiles.loader as loader_mod
import tuned.profiles.variables as variables_mod
from tuned.daemon.daemon import Daemon
from tuned.hardware.device_matcher import DeviceMatcher
from tuned.plugins.base import Plugin
from tuned.plugins.plugin_disk import DiskPlugin
from tuned.plugins.plugin_sysfs import SysfsPlugin
from tuned.profiles.locator import Locator
from tuned.profiles.merger import Merger
from tuned.profiles.factory import Factory
from tuned.units.manager import Manager
from tuned.utils.commands import commands
from tuned.utils.global_config import GlobalConfig

# Functions iosched evaluates (pure ones); the others are stubbed to give no
# value, as tuned does when one fails.
EVALUATED = {"strip", "kb2s", "s2kb", "regex_search_ternary", "assertion", "assertion_non_equal"}


class Src(str):
    """An option's value with the file and line it was read from."""
    src = None


def option_lines(path):
    """(section, option) -> line of its last assignment, read as
    configparser reads (first '=' splits, '#'/';' lines are comments)."""
    lines, section, indent = {}, None, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            ind = len(line) - len(line.lstrip())
            if indent is not None and ind > indent:
                continue  # a continuation line
            indent = ind
            m = re.match(r"\[(.+)\]", s)
            if m:
                section, indent = m.group(1), None
                continue
            if "=" in s:
                lines[(section, s.split("=", 1)[0].rstrip())] = n
    return lines


def main():
    req = json.load(sys.stdin)
    root = os.path.normpath(req["root"])
    strip_root = lambda p: "/" + os.path.relpath(p, root) if p.startswith(root + "/") else p

    for name in ("ACTIVE_PROFILE_FILE", "POST_LOADED_PROFILE_FILE", "PROFILE_MODE_FILE"):
        setattr(consts, name, root + getattr(consts, name))

    # Option sources.
    orig_load = loader_mod.Loader._load_config_data

    def load_config_data(self, file_name):
        config = orig_load(self, file_name)
        lines = option_lines(file_name)
        for section, opts in config.items():
            for k, v in list(opts.items()):
                if isinstance(v, str):
                    t = Src(v)
                    t.src = (strip_root(file_name), lines.get((section, k), lines.get(("DEFAULT", k), 0)))
                    opts[k] = t
        return config
    loader_mod.Loader._load_config_data = load_config_data
    # ${i:PROFILE_DIR} is the directory as on the machine.
    orig_dir = loader_mod.Loader._expand_profile_dir
    loader_mod.Loader._expand_profile_dir = lambda self, d, s: orig_dir(self, strip_root(d), s)
    # A variables include= file is a path on the machine.
    orig_add_file = variables_mod.Variables.add_from_file
    variables_mod.Variables.add_from_file = lambda self, f: orig_add_file(self, root + f)

    orig_func = func_repo.Repository.load_func

    def load_func(self, name):
        f = orig_func(self, name)
        if name == "virt_check":
            stub = types.SimpleNamespace(execute=lambda args: (args[0] if req["vm"] else args[1]) if f._check_args(args, 2, 2) else None)
            return stub
        if name not in EVALUATED:
            return types.SimpleNamespace(execute=lambda args: None)
        return f
    func_repo.Repository.load_func = load_func

    out = {"profile": "", "error": "", "writes": {d["name"]: [] for d in req["disks"]}}
    # daemon.py _get_startup_profile: not in manual mode, tuned runs its
    # recommender (commands, the machine's files); that is not done here.
    active, manual = commands().get_active_profile()
    if manual is None:
        manual = active is not None
    if not manual:
        out["error"] = "auto"
        print(json.dumps(out))
        return

    variables = variables_mod.Variables()
    locator = Locator([root + "/usr/lib/tuned", root + "/etc/tuned"])
    loader = loader_mod.Loader(locator, Factory(), Merger(), None, variables)
    daemon = Daemon(None, loader)
    profile = daemon.profile
    if profile is None:
        out["error"] = "no profile"
        print(json.dumps(out))
        return
    out["profile"] = profile.name

    # units/manager.py create: filters, default priority (from
    # tuned-main.conf, as daemon/application.py reads it), stable sort.
    config = {}
    if os.path.exists(root + consts.GLOBAL_CONFIG_FILE):
        config = GlobalConfig(root + consts.GLOBAL_CONFIG_FILE)
    def_priority = int(config.get(consts.CFG_DEFAULT_INSTANCE_PRIORITY, consts.CFG_DEF_DEFAULT_INSTANCE_PRIORITY))
    cpuinfo = config.get(consts.CFG_CPUINFO_STRING)
    if cpuinfo is None and os.path.exists(root + "/proc/cpuinfo"):
        with open(root + "/proc/cpuinfo") as f:
            cpuinfo = f.read()
    fake_manager = types.SimpleNamespace(_config={consts.CFG_CPUINFO_STRING: cpuinfo,
                                                  consts.CFG_UNAME_STRING: config.get(consts.CFG_UNAME_STRING)}, _cmd=None)
    infos = []
    for name, info in profile.units.items():
        if not info.enabled:
            continue
        if info.cpuinfo_regex is not None:
            if cpuinfo is None and info.type not in ("disk", "sysfs"):
                pass  # no queue attribute either way
            elif cpuinfo is None:
                raise SystemExit("%s: cpuinfo_regex needs ROOT/proc/cpuinfo" % name)
            elif not Manager._unit_matches_cpuinfo(fake_manager, info):
                continue
        if info.uname_regex is not None and info.type in ("disk", "sysfs"):
            if config.get(consts.CFG_UNAME_STRING) is None:
                raise SystemExit("%s: uname_regex needs uname_string in ROOT's tuned-main.conf" % name)
            if not Manager._unit_matches_uname(fake_manager, info):
                continue
        info.options.setdefault("priority", def_priority)
        info.options["priority"] = int(info.options["priority"])
        infos.append(info)
    infos.sort(key=lambda x: x.options["priority"])
    for info in infos:
        info.options.pop("priority")

    # The disks, in a tree of empty files for glob.
    tmp = tempfile.mkdtemp(prefix="tuned-oracle-")
    try:
        compute(req, out, tmp, infos, variables)
    finally:
        shutil.rmtree(tmp)
    print(json.dumps(out))


def compute(req, out, tmp, infos, variables):
    """The disk and sysfs plug-ins' writes, in instance order, into out."""
    sysroot = tmp + "/sys"
    supported = []
    for d in req["disks"]:
        q = os.path.join(sysroot, d["path"], "queue")
        for a in d["attrs"]:
            os.makedirs(os.path.dirname(os.path.join(q, a)), exist_ok=True)
            open(os.path.join(q, a), "w").close()
        # The backing device's read_ahead_kb is the queue's (both are
        # the disk's ra_pages): reached through the disk's bdi link.
        bdi = os.path.join(sysroot, "devices/virtual/bdi", d.get("dev", d["name"]))
        os.makedirs(bdi, exist_ok=True)
        open(os.path.join(bdi, "read_ahead_kb"), "w").close()
        os.symlink(bdi, os.path.join(sysroot, d["path"], "bdi"))
        for link in ("block/" + d["name"], "class/block/" + d["name"], "dev/block/" + d.get("dev", "")):
            if link.endswith("/"):
                continue
            os.makedirs(os.path.dirname(os.path.join(sysroot, link)), exist_ok=True)
            os.symlink(os.path.join(sysroot, d["path"]), os.path.join(sysroot, link))
        dev = types.SimpleNamespace(device_type="disk", attributes={"removable": d["removable"].encode()},
                                    parent=None if d["parent"] is None else types.SimpleNamespace(subsystem=d["parent"]))
        if DiskPlugin._device_is_supported(dev):
            supported.append(d["name"])

    commands = [m._command["name"] for m in DiskPlugin.__dict__.values() if hasattr(m, "_command") and "get" not in m._command]
    matcher = DeviceMatcher()
    free = set(supported)
    for info in infos:
        if info.type == "disk":
            to_assign = set(matcher.match_list(info.devices, free))
            free -= to_assign
            for cmd in commands:
                raw = info.options.get(cmd)
                if raw is None:
                    continue
                value = variables.expand(raw)
                write = disk_write(cmd, value)
                if write is None:
                    continue
                for disk in sorted(to_assign):
                    out["writes"][disk].append(dict(file=raw.src[0], line=raw.src[1], attr=write[0], value=write[1], cmp=write[2]))
        elif info.type == "sysfs":
            opts = collections.OrderedDict((os.path.normpath(k), v) for k, v in info.options.items())
            for key, raw in opts.items():
                value = variables.expand(raw)
                for f in glob.iglob(tmp + key):
                    if not SysfsPlugin._check_sysfs(None, f[len(tmp):]):
                        continue
                    real = os.path.realpath(f)
                    for d in req["disks"]:
                        q = os.path.join(sysroot, d["path"], "queue") + "/"
                        bdi = os.path.join(sysroot, "devices/virtual/bdi", d.get("dev", d["name"]), "read_ahead_kb")
                        attr = real[len(q):] if real.startswith(q) else "read_ahead_kb" if real == bdi else None
                        if attr is not None:
                            out["writes"][d["name"]].append(dict(file=raw.src[0], line=raw.src[1], attr=attr, value=value, cmp=""))


def disk_write(cmd, value):
    """The queue attribute, value and comparison of a [disk] command, by
    tuned's modifiers: ">N" writes only over a lower current value, "<N"
    only over a higher one (asked of base.py with a current value below
    and above any), then the disk plug-in's parsing."""
    if value is None or value == "":
        return None
    lo = Plugin._process_assignment_modifiers(types.SimpleNamespace(), value, str(-(1 << 62)))
    hi = Plugin._process_assignment_modifiers(types.SimpleNamespace(), value, str(1 << 62))
    cmp = ""
    if lo is not None and hi is None:
        cmp, value = ">", lo
    elif lo is None and hi is not None:
        cmp, value = "<", hi
    if cmd == "elevator":
        if not cmp and len(value) > 1 and value[0] in "<>":
            return None  # tuned writes it as it is; no scheduler has such a name
        return ("scheduler", value.strip() if cmp else value, cmp)
    if cmd == "readahead":
        v = DiskPlugin._parse_ra(None, value)
        return None if v is None else ("read_ahead_kb", "%d" % v, cmp)
    if cmd == "readahead_multiply":
        try:
            float(value)
        except ValueError:
            return None
        return None if cmp else ("read_ahead_kb", value.strip(), "*")
    return None


if __name__ == "__main__":
    tuned.logs.get().setLevel("CRITICAL")
    main()
