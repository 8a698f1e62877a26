#!/usr/bin/env bash
# contrib/bench/run.sh: the daemon's speed and size, all in one run.
#
#   sudo contrib/bench/run.sh            # the figures below
#   sudo contrib/bench/run.sh compare    # iosched against the alternatives (compare.sh)
#
# Measures on this machine, with 1000 loop devices and a scheduler switch
# (loop's default none -> mq-deadline):
#   1. the raw limit: the 1000 scheduler files written directly, all at once;
#      and written one goroutine each as each loop is created;
#   2. iosched daemon: 1000 loops appearing at once (daemon SIGSTOPped while
#      they are created, then SIGCONT), and 1000 hot-plugged while it runs;
#   3. systemd-udevd (its own instance, in a private mount namespace that sees
#      only the benchmark's rule) with ATTR{queue/scheduler}="mq-deadline",
#      the same two ways;
#   4. a rescan (SIGUSR1) of the 1000 disks all in policy: time and writes;
#   5. the daemon's VmRSS/VmHWM with 1000 disks managed, and its CPU while
#      nothing happens.
# See README.md. Only loop numbers 40000-41999 (BASE to BASE+1999) are
# created, written and removed; every policy and rule matches only those.
#
# Environment: RESULTS (directory for the summary JSON, default
# contrib/bench/results), IDLE_WINDOW (quiet seconds wanted, default 10),
# ALLOW_UDEVD=1 (measure although a systemd-udevd already runs),
# BUILD_FROM=worktree (build iosched from the working tree, not HEAD; or
# BUILD_FROM=REV, from another commit, for A/B runs with this harness),
# SKIP_UDEVD=1, KEEP=1 (keep the work directory), BASE (the first loop
# number, default 40000; a multiple of 2000 whose range is free, for a
# machine where a loop of the default range is stuck in the kernel),
# METRICS=1 (the daemon writes a metrics file, [daemon] metrics_file).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
	echo "run.sh: must run as root: sudo $0" >&2
	exit 1
fi

if ! command -v go >/dev/null; then
	echo "run.sh: go not found in PATH (sudo resets it: sudo env PATH=\"\$PATH\" $0)" >&2
	exit 1
fi

MODE=${1:-all}
case $MODE in
all | compare) ;;
*)
	echo "usage: $0 [compare]" >&2
	exit 2
	;;
esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RESULTS=${RESULTS:-$HERE/results}
IDLE_WINDOW=${IDLE_WINDOW:-10}
SKIP_UDEVD=${SKIP_UDEVD:-0}
N=1000
BASE=${BASE:-40000}
if ! [[ $BASE =~ ^[1-9][0-9]{4}$ ]] || ((BASE % 2000 != 0)); then
	echo "run.sh: BASE=$BASE: want a multiple of 2000 from 10000 to 98000" >&2
	exit 2
fi
export IOSCHED_BENCH_BASE=$BASE # loopbench's range
A=$BASE # raw parallel, daemon and udevd hot-plug
B=$((BASE + N)) # raw write-on-create, daemon and udevd burst
# LOOPS is a glob (policy, udev rule, tuned) for exactly loops A to B+N-1.
LOOPS="loop${BASE:0:1}[${BASE:1:1}$((${BASE:1:1} + 1))][0-9][0-9][0-9]"
SCHED=mq-deadline
UDEVD=/lib/systemd/systemd-udevd

TMP=$(mktemp -d /tmp/iosched-bench.XXXXXX)
LB=$TMP/loopbench
IOSCHED=$TMP/iosched
DAEMON_PID=
UDEVD_PID=
TUNED_PID= # compare.sh's; SIGKILLed (on SIGTERM tuned first undoes its settings, one by one)
WAIT_PID=
CHILD= # the helper running now (see bg)
CREATED=0 # set once loops may exist that this run created

log() { printf '%s %s\n' "$(date +%T.%3N)" "$*" >&2; }
metric() { printf '%s %s\n' "$1" "$2" >>"$TMP/metrics.txt"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.6f", b - a }'; }

# stop_pid PID: SIGCONT (a burst may have left it stopped), SIGTERM, wait up
# to 10 s, then SIGKILL. Only ever called with this script's own children.
stop_pid() {
	local pid=$1 i
	kill -CONT "$pid" 2>/dev/null || true
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "pid $pid did not stop in 10 s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[[ -n $CHILD ]] && kill "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
	[[ -n $WAIT_PID ]] && kill "$WAIT_PID" 2>/dev/null && wait "$WAIT_PID" 2>/dev/null
	[[ -n $DAEMON_PID ]] && stop_pid "$DAEMON_PID"
	[[ -n $UDEVD_PID ]] && stop_pid "$UDEVD_PID"
	[[ -n $TUNED_PID ]] && kill -KILL "$TUNED_PID" 2>/dev/null && wait "$TUNED_PID" 2>/dev/null
	if ((CREATED)) && [[ -x $LB ]]; then
		"$LB" remove -first $A -count $((2 * N)) -parallel 64 || log "WARNING: some loops in $A-$((B + N - 1)) could not be removed"
	fi
	if ((rc != 0)) || [[ ${KEEP:-0} == 1 ]]; then
		log "work directory kept: $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# bg runs a helper and waits for it with the wait builtin, which a trapped
# SIGINT/SIGTERM interrupts at once (a foreground command would be waited for).
bg() {
	"$@" &
	CHILD=$!
	local rc=0
	wait "$CHILD" || rc=$?
	CHILD=
	return "$rc"
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# on-CPU nanoseconds and voluntary+involuntary context switches, all threads
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
remove_loops() { bg "$LB" remove -first "$1" -count $N -parallel 64; }

# start_daemon starts the benchmark's iosched daemon (policy.toml, its own
# runtime and state directories) and returns once it sent READY=1.
start_daemon() {
	"$LB" waitready -socket "$TMP/notify.sock" -timeout 120s >"$TMP/ready.txt" &
	WAIT_PID=$!
	for ((i = 0; i < 200; i++)); do [[ -S $TMP/notify.sock ]] && break; sleep 0.01; done
	NOTIFY_SOCKET=$TMP/notify.sock "$IOSCHED" daemon --policy "$POLICY" \
		--runtime-dir "$TMP/run" --state-dir "$TMP/state" 2>"$TMP/daemon.log" &
	DAEMON_PID=$!
	wait "$WAIT_PID"
	WAIT_PID=
	rm -f "$TMP/notify.sock"
}

# start_udevd RULES starts a private systemd-udevd whose only rules are the
# files of directory RULES. unshare execs: the pid is udevd's. In its mount
# namespace both rules directories are RULES, so it acts on nothing but
# what those rules match (loops 40000-41999), and /run is a tmpfs of its
# own, so no file is left in /etc/udev or /run/udev. udevadm reaches it
# through nsenter -m.
start_udevd() {
	unshare -m --propagation private -- sh -c '
		mount -t tmpfs -o mode=0755 tmpfs /run &&
		mount --bind "$1" /usr/lib/udev/rules.d &&
		mount --bind "$1" /etc/udev/rules.d &&
		exec "$2"' sh "$1" "$UDEVD" >>"$TMP/udevd.log" 2>&1 &
	UDEVD_PID=$!
	for ((i = 0; i < 200; i++)); do
		nsenter -t $UDEVD_PID -m udevadm control --ping >/dev/null 2>&1 && break
		sleep 0.05
	done
	nsenter -t $UDEVD_PID -m udevadm control --ping
	[[ $(cat /proc/$UDEVD_PID/comm) == systemd-udevd ]] || { log "udevd did not start"; exit 1; }
}

# ---------------------------------------------------------------- preflight
for n in $(seq $A $((B + N - 1))); do
	if [[ -e /sys/block/loop$n ]]; then
		echo "run.sh: loop$n exists: loops $A-$((B + N - 1)) must be free (a previous run's? remove them with: cd contrib/bench && go run ./cmd/loopbench remove -first $A -count $((2 * N)))" >&2
		exit 1
	fi
done
if pgrep -x systemd-udevd >/dev/null && [[ ${ALLOW_UDEVD:-0} != 1 ]]; then
	echo "run.sh: a systemd-udevd is already running: it would act on every benchmark loop too and distort" >&2
	echo "        each figure. Run where none runs, or set ALLOW_UDEVD=1 to measure anyway (it is left alone)." >&2
	exit 1
fi

# iosched is built from the last commit (BUILD_FROM=worktree: from the working
# tree as it is), so that work in progress elsewhere in the tree neither breaks
# nor silently changes what is measured; and built as packaging/build.sh builds
# the binary a package ships (static, stripped), since its memory is measured.
build_iosched() { CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$IOSCHED" ./cmd/iosched; }
if [[ ${BUILD_FROM:-commit} == worktree ]]; then
	log "building iosched (working tree) and loopbench in $TMP"
	(cd "$REPO" && build_iosched)
	metric build "worktree"
else
	# BUILD_FROM=REV: iosched at another commit, the same harness (A/B runs).
	rev=${BUILD_FROM:-HEAD}
	[[ $rev == commit ]] && rev=HEAD
	commit=$(cd "$REPO" && git rev-parse --verify "$rev^{commit}")
	log "building iosched (commit ${commit:0:12}) and loopbench in $TMP"
	mkdir "$TMP/src"
	(cd "$REPO" && git archive "$commit") | tar -x -C "$TMP/src"
	(cd "$TMP/src" && build_iosched)
	metric build "commit"
fi
# loopbench is a module of its own (go.mod here: gonum/plot stays out of
# the daemon's), built against this tree's iosched packages (replace ../..).
(cd "$HERE" && go build -o "$LB" ./cmd/loopbench)

if [[ $SKIP_UDEVD != 1 && ! -x $UDEVD ]]; then
	log "installing Debian's udev (systemd-udevd) for the comparison"
	# Debian's policy-rc.d / chroot detection keeps the package from
	# starting a udevd of its own; the check below makes sure.
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq udev >/dev/null
	if pgrep -x systemd-udevd >/dev/null && [[ ${ALLOW_UDEVD:-0} != 1 ]]; then
		echo "run.sh: installing udev started a systemd-udevd (systemd runs it now): ALLOW_UDEVD=1 to measure anyway" >&2
		exit 1
	fi
fi

metric loops $N
metric cpus "$(nproc)"
metric host "$(hostname)"
# The commit measured: BUILD_FROM's, not the harness's HEAD (an A/B run's
# two builds share one HEAD); for the working tree, HEAD and "+worktree".
if [[ ${BUILD_FROM:-commit} == worktree ]]; then
	metric commit "$(cd "$REPO" && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)+worktree"
else
	metric commit "${commit:0:12}"
fi

# The policy has a directory of its own, as /etc/iosched is: the daemon
# follows its policy's directory, and the work directory changes all the
# time (the daemon's own log is in it).
POLICY=$TMP/etc/policy.toml
mkdir -p "$TMP/etc"
cat >"$POLICY" <<EOF
# The benchmark's policy: loop devices $A-$((B + N - 1)) only.
[[rule]]
name = "bench loops: $SCHED"
[rule.match]
class = "loop"
name = "$LOOPS"
[rule.set]
scheduler = "$SCHED"
EOF
if [[ ${METRICS:-0} == 1 ]]; then
	printf '[daemon]\nmetrics_file = "%s"\n' "$TMP/iosched.prom" >>"$POLICY"
	metric metrics_file "$TMP/iosched.prom"
fi
if ! out=$("$IOSCHED" check --policy "$POLICY" 2>&1); then
	echo "$out" >&2
	exit 1
fi
mkdir -p "$TMP/rules" "$TMP/run" "$TMP/state"
cat >"$TMP/rules/99-iosched-bench.rules" <<EOF
ACTION=="add|change", SUBSYSTEM=="block", KERNEL=="$LOOPS", ATTR{queue/scheduler}="$SCHED"
EOF

if [[ $MODE == compare ]]; then
	# shellcheck source=contrib/bench/compare.sh
	. "$HERE/compare.sh"
	exit 0
fi

# ---------------------------------------------------------------- 1. raw
CREATED=1
log "raw: create $N loops, then write all $N scheduler files at once"
bg "$LB" raw -first $A -count $N -sched $SCHED >"$TMP/raw.json"
metric raw_write_1_s "$("$LB" jget "$TMP/raw.json" write_s)"
remove_loops $A
log "raw: write each scheduler file as its loop is created"
bg "$LB" rawhotplug -first $B -count $N -sched $SCHED >"$TMP/rawhotplug.json"
remove_loops $B

# ---------------------------------------------------------------- 2. daemon
log "iosched daemon: start, wait for READY=1"
start_daemon
metric daemon_ready_s "$(cat "$TMP/ready.txt")"
metric daemon_start_disks "$("$LB" jget "$TMP/run/state.json" last_scan.disks)"

log "iosched daemon: $N loops at once (SIGSTOP, create, SIGCONT)"
c0=$(cpu_ticks $DAEMON_PID)
bg "$LB" hotplug -first $B -count $N -sched $SCHED -pause $DAEMON_PID >"$TMP/daemon_burst.json"
metric daemon_burst_cpu_s "$(awk -v t=$(($(cpu_ticks $DAEMON_PID) - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }')"
"$LB" logspan -first $B -count $N -log "$TMP/daemon.log" -since "$("$LB" jget "$TMP/daemon_burst.json" start_unix_nano)" >"$TMP/daemon_burst_log.json"
metric hwm_after_burst_kib "$(status_kib $DAEMON_PID VmHWM)"

# Wait for the state file to show the 1000 (it is written 250 ms after a change).
for ((i = 0; i < 100; i++)); do
	[[ $("$LB" jget "$TMP/run/state.json" managed 2>/dev/null) == "$N" ]] && break
	sleep 0.1
done

log "iosched daemon: rescan of $N disks in policy (SIGUSR1) x5"
sets0=$(grep -c ' msg=set ' "$TMP/daemon.log" || true)
scans=()
writes=0
for r in 1 2 3 4 5; do
	before=$("$LB" jget "$TMP/run/state.json" last_scan.at)
	kill -USR1 $DAEMON_PID
	for ((i = 0; i < 100; i++)); do
		sleep 0.05
		at=$("$LB" jget "$TMP/run/state.json" last_scan.at)
		[[ $at != "$before" ]] && break
	done
	[[ $at != "$before" ]] || { log "no rescan recorded in state.json after SIGUSR1"; exit 1; }
	scans+=("$("$LB" jget "$TMP/run/state.json" last_scan.seconds)")
	writes=$((writes + $("$LB" jget "$TMP/run/state.json" last_scan.writes)))
done
sorted=($(printf '%s\n' "${scans[@]}" | sort -g))
metric rescan_best_s "${sorted[0]}"
metric rescan_median_s "${sorted[2]}"
metric rescan_writes $writes
metric rescan_disks "$("$LB" jget "$TMP/run/state.json" last_scan.disks)"
metric rescan_log_sets $(($(grep -c ' msg=set ' "$TMP/daemon.log" || true) - sets0))

log "iosched apply: no-op over the $N (a proxy: a new process reading each disk in full)"
names=$(seq -f "loop%g" $B $((B + N - 1)))
t0=$(now)
# shellcheck disable=SC2086
"$IOSCHED" apply --policy "$POLICY" $names >"$TMP/apply.txt" 2>&1
metric apply_noop_s "$(since "$t0")"
metric apply_summary "$(tail -1 "$TMP/apply.txt" | tr ' ' '_')"

metric rss_kib "$(status_kib $DAEMON_PID VmRSS)"
metric rss_anon_kib "$(status_kib $DAEMON_PID RssAnon)"
metric rss_file_kib "$(status_kib $DAEMON_PID RssFile)"
metric threads "$(status_kib $DAEMON_PID Threads)"

# After 2 s of settling: the daemon writes its state file 250 ms after the
# last rescan and ends the threads a burst left 0.1 s after it.
log "iosched daemon: CPU while idle, ${IDLE_WINDOW} quiet seconds (at most $((3 * IDLE_WINDOW)) s)"
bg "$LB" idle -pid $DAEMON_PID -settle 2s -quiet "$IDLE_WINDOW" -max $((3 * IDLE_WINDOW)) >"$TMP/idle.json"
# Settled: the burst's extra threads ended and the memory it freed handed
# back (the figure above is taken 0.3 s after the last rescan, before that).
metric rss_settled_kib "$(status_kib $DAEMON_PID VmRSS)"
metric threads_settled "$(status_kib $DAEMON_PID Threads)"

log "iosched daemon: remove the $N while it runs"
remove_loops $B
log "iosched daemon: $N loops hot-plugged"
c0=$(cpu_ticks $DAEMON_PID)
bg "$LB" hotplug -first $A -count $N -sched $SCHED >"$TMP/daemon_hotplug.json"
metric daemon_hotplug_cpu_s "$(awk -v t=$(($(cpu_ticks $DAEMON_PID) - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }')"
"$LB" logspan -first $A -count $N -log "$TMP/daemon.log" -since "$("$LB" jget "$TMP/daemon_hotplug.json" start_unix_nano)" >"$TMP/daemon_hotplug_log.json"
metric hwm_kib "$(status_kib $DAEMON_PID VmHWM)"
metric rss_after_hotplug_kib "$(status_kib $DAEMON_PID VmRSS)"
kill -0 $DAEMON_PID || { log "the daemon died"; exit 1; }

log "iosched daemon: stop"
t0=$(now)
stop_pid $DAEMON_PID
metric daemon_stop_s "$(since "$t0")"
DAEMON_PID=
metric daemon_log_warnings "$(grep -c -E 'level=(WARN|ERROR)' "$TMP/daemon.log" || true)"
metric daemon_lost_uevents "$(grep -c 'uevents were lost' "$TMP/daemon.log" || true)"
remove_loops $A

# ---------------------------------------------------------------- 3. udevd
if [[ $SKIP_UDEVD != 1 ]]; then
	log "systemd-udevd: start a private one (its own mount namespace: only the benchmark's rule, its own /run)"
	start_udevd "$TMP/rules"
	metric udevd_version "$("$UDEVD" --version | head -1 | tr ' ' '_')"
	udevd_cpu() { # ticks of udevd, its live workers and the workers it reaped
		local s c
		s=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$UDEVD_PID/stat)
		for c in $(pgrep -P $UDEVD_PID); do s=$((s + $(cpu_ticks "$c" 2>/dev/null || echo 0))); done
		echo "$s"
	}
	ticks_s() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }'; }

	log "systemd-udevd: $N loops at once (SIGSTOP, create, SIGCONT)"
	c0=$(udevd_cpu)
	bg "$LB" hotplug -first $B -count $N -sched $SCHED -pause $UDEVD_PID >"$TMP/udevd_burst.json"
	metric udevd_burst_cpu_s "$(ticks_s $(($(udevd_cpu) - c0)))"
	log "systemd-udevd: re-trigger 'change' on the $N already set, until settled"
	t0=$(now)
	"$LB" uevent -first $B -count $N -action change
	nsenter -t $UDEVD_PID -m udevadm settle -t 60
	metric udevd_retrigger_s "$(since "$t0")"
	remove_loops $B
	nsenter -t $UDEVD_PID -m udevadm settle -t 60

	log "systemd-udevd: $N loops hot-plugged"
	c0=$(udevd_cpu)
	bg "$LB" hotplug -first $A -count $N -sched $SCHED >"$TMP/udevd_hotplug.json"
	metric udevd_hotplug_cpu_s "$(ticks_s $(($(udevd_cpu) - c0)))"
	log "systemd-udevd: stop"
	stop_pid $UDEVD_PID
	UDEVD_PID=
	remove_loops $A
fi

# ---------------------------------------------------------------- 1b. raw again
log "raw: once more at the end (the machine is noisy)"
bg "$LB" raw -first $A -count $N -sched $SCHED >"$TMP/raw2.json"
metric raw_write_2_s "$("$LB" jget "$TMP/raw2.json" write_s)"
remove_loops $A
CREATED=0
metric raw_write_s "$(awk -v a="$("$LB" jget "$TMP/raw.json" write_s)" -v b="$("$LB" jget "$TMP/raw2.json" write_s)" 'BEGIN { print (a + b) / 2 }')"

# ---------------------------------------------------------------- report
mkdir -p "$RESULTS"
out=$RESULTS/bench-$(date -u +%Y%m%dT%H%M%SZ).json
echo
"$LB" report -dir "$TMP" -out "$out"
echo
echo "summary: $out"
