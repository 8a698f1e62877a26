#!/usr/bin/env bash
# contrib/bench/run.sh: the daemon's speed and size, all in one run.
#
#   sudo contrib/bench/run.sh            # the figures below
#   sudo contrib/bench/run.sh compare    # iosched against the alternatives (compare.sh)
#
# Measures on this machine, with 1000 loop devices and a scheduler switch
# (loop's default none -> mq-deadline), in REPS rounds (default 3) that
# alternate the ways, so that each ratio is taken within one round:
#   1. the 1000 loops created one after another with nothing reacting; the
#      raw writers: each scheduler written by a goroutine of the creator as
#      its loop is created (hot-plug), and all 1000 written at once (loops
#      present);
#   2. iosched daemon (a fresh one each round): 1000 loops hot-plugged while
#      it runs, and 1000 appearing at once (daemon SIGSTOPped while they are
#      created, then SIGCONT); its CPU and peak memory;
# then once:
#   3. a rescan (SIGUSR1) of the 1000 disks all in policy: time and writes;
#      the daemon's VmRSS with 1000 disks managed, and its CPU while
#      nothing happens;
#   4. systemd-udevd (its own instance, in a private mount namespace that sees
#      only the benchmark's rule) with ATTR{queue/scheduler}="mq-deadline",
#      both ways.
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
# METRICS=1 (the daemon writes a metrics file, [daemon] metrics_file),
# REPS (rounds, default 3), ALSO (other daemon builds measured in the same
# rounds, shown but not judged: "NAME=REV[,ARG...] ...", iosched at commit
# REV, started with the extra daemon arguments ARG, or with ARG in its
# environment when ARG is VAR=VALUE; e.g. ALSO="p192=HEAD,--parallel=192
# gmp2=HEAD,GOMAXPROCS=2"), SKIP_FLOOR=1 (do not measure cmd/floor, the
# uevent-reaction floor, in the rounds), LOCK (a file to hold a flock on while
# measuring, once the builds are done: on a machine where others' tests
# create loop devices too, LOCK=/tmp/iosched-tests.lock).
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
REPS=${REPS:-3}
if ! [[ $REPS =~ ^[1-9][0-9]?$ ]]; then
	echo "run.sh: REPS=$REPS: want a number of rounds, 1 to 99" >&2
	exit 2
fi
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
IOSCHED=$TMP/iosched # the build judged; ALSO's are $TMP/NAME
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

# start_daemon [NAME] starts the benchmark's iosched daemon (policy.toml,
# fresh runtime and state directories), the build NAME (default: iosched,
# the one judged; others from ALSO, with their extra arguments), logging to
# $TMP/daemon.log, and returns once it sent READY=1.
start_daemon() {
	local name=${1:-iosched} extra=() env=() args=() a
	[[ -n ${ALSO_ARGS[$name]:-} ]] && IFS=, read -r -a extra <<<"${ALSO_ARGS[$name]}"
	for a in "${extra[@]}"; do
		if [[ $a =~ ^[A-Z_][A-Z0-9_]*= ]]; then env+=("$a"); else args+=("$a"); fi
	done
	rm -rf "$TMP/run" "$TMP/state"
	mkdir -p "$TMP/run" "$TMP/state"
	"$LB" waitready -socket "$TMP/notify.sock" -timeout 120s >"$TMP/ready.txt" &
	WAIT_PID=$!
	for ((i = 0; i < 200; i++)); do [[ -S $TMP/notify.sock ]] && break; sleep 0.01; done
	if [[ $name == floor ]]; then
		# cmd/floor: the scheduler written on each loop's add uevent, nothing else.
		NOTIFY_SOCKET="$TMP/notify.sock" "$TMP/floor" -first $A -count $((2 * N)) -sched "$SCHED" 2>"$TMP/daemon.log" &
	else
		env NOTIFY_SOCKET="$TMP/notify.sock" "${env[@]}" "$TMP/$name" daemon --policy "$POLICY" \
			--runtime-dir "$TMP/run" --state-dir "$TMP/state" "${args[@]}" 2>"$TMP/daemon.log" &
	fi
	DAEMON_PID=$!
	wait "$WAIT_PID"
	WAIT_PID=
	rm -f "$TMP/notify.sock"
}

# wait_managed N: until the state file shows N disks managed (it is written
# 250 ms after a change), at most 10 s.
wait_managed() {
	for ((i = 0; i < 100; i++)); do
		[[ $("$LB" jget "$TMP/run/state.json" managed 2>/dev/null) == "$1" ]] && return 0
		sleep 0.1
	done
	log "the daemon's state file does not show $1 disks managed after 10 s"
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
build_iosched() { CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" ./cmd/iosched; }
# build_at REV OUT: iosched at commit REV.
build_at() {
	local rev=$1 out=$2 src
	src=$(mktemp -d "$TMP/src.XXXXXX")
	(cd "$REPO" && git archive "$rev") | tar -x -C "$src"
	(cd "$src" && build_iosched "$out")
	rm -rf "$src"
}
if [[ ${BUILD_FROM:-commit} == worktree ]]; then
	log "building iosched (working tree) and loopbench in $TMP"
	(cd "$REPO" && build_iosched "$IOSCHED")
	metric build "worktree"
else
	# BUILD_FROM=REV: iosched at another commit, the same harness (A/B runs).
	rev=${BUILD_FROM:-HEAD}
	[[ $rev == commit ]] && rev=HEAD
	commit=$(cd "$REPO" && git rev-parse --verify "$rev^{commit}")
	log "building iosched (commit ${commit:0:12}) and loopbench in $TMP"
	build_at "$commit" "$IOSCHED"
	metric build "commit"
fi
# ALSO: more daemon builds, measured in the same rounds.
declare -A ALSO_ARGS=()
DAEMONS=(iosched)
for spec in ${ALSO:-}; do
	name=${spec%%=*} rest=${spec#*=}
	if ! [[ $name =~ ^[a-z][a-z0-9_]*$ && $spec == *=* && $name != iosched && $name != floor && $name != raw* && $name != create ]]; then
		echo "run.sh: ALSO entry '$spec': want NAME=REV[,ARG...], NAME of [a-z0-9_]" >&2
		exit 2
	fi
	args=
	[[ $rest == *,* ]] && args=${rest#*,} && rest=${rest%%,*}
	c=$(cd "$REPO" && git rev-parse --verify "${rest:-HEAD}^{commit}")
	log "building $name: iosched at ${c:0:12}${args:+, daemon $args}"
	build_at "$c" "$TMP/$name"
	ALSO_ARGS[$name]=$args
	DAEMONS+=("$name")
	metric "also_$name" "${c:0:12}${args:+,$args}"
done
# The floor (cmd/floor) is measured in the same rounds as a daemon build;
# the report gives iosched's figures as ratios to it. SKIP_FLOOR=1: not.
if [[ ${SKIP_FLOOR:-0} != 1 ]]; then
	(cd "$HERE" && go build -o "$TMP/floor" ./cmd/floor)
	DAEMONS+=(floor)
fi
metric daemons "$(IFS=,; echo "${DAEMONS[*]}")"
metric reps "$REPS"
# loopbench is a module of its own (go.mod here: gonum/plot stays out of
# the daemon's), built against this tree's iosched packages (replace ../..).
(cd "$HERE" && go build -o "$LB" ./cmd/loopbench)
if [[ -n ${LOCK:-} ]]; then
	log "waiting for the lock $LOCK"
	exec 9>"$LOCK"
	flock 9
fi

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

# ---------------------------------------------------------------- 1-2. rounds
CREATED=1
cpu_s() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { print t / hz }'; }

# raw_round R: nothing reacting, then the two raw writers.
raw_round() {
	local r=$1
	log "round $r: $N loops created with nothing reacting"
	bg "$LB" create -json -first $B -count $N >"$TMP/r${r}_create.json"
	remove_loops $B
	log "round $r: raw, each scheduler written as its loop is created"
	bg "$LB" rawhotplug -first $B -count $N -sched $SCHED >"$TMP/r${r}_rawhotplug.json"
	remove_loops $B
	log "round $r: raw, $N created, then all $N written at once"
	bg "$LB" raw -first $A -count $N -sched $SCHED >"$TMP/r${r}_raw.json"
	remove_loops $A
}

# daemon_round R NAME: a fresh daemon of build NAME, $N loops hot-plugged,
# removed while it runs, then $N at once.
daemon_round() {
	local r=$1 name=$2 p=r$1_$2 c0
	start_daemon "$name"
	log "round $r: $name daemon, $N loops hot-plugged"
	c0=$(cpu_ticks $DAEMON_PID)
	bg "$LB" hotplug -first $A -count $N -sched $SCHED >"$TMP/${p}_hotplug.json"
	metric "${p}_hotplug_cpu_s" "$(cpu_s $(($(cpu_ticks $DAEMON_PID) - c0)))"
	# The floor logs no writes and keeps no state file.
	[[ $name == floor ]] || "$LB" logspan -first $A -count $N -log "$TMP/daemon.log" -since "$("$LB" jget "$TMP/${p}_hotplug.json" start_unix_nano)" >"$TMP/${p}_hotplug_log.json"
	remove_loops $A
	[[ $name == floor ]] || wait_managed 0
	log "round $r: $name daemon, $N loops at once (SIGSTOP, create, SIGCONT)"
	c0=$(cpu_ticks $DAEMON_PID)
	bg "$LB" hotplug -first $B -count $N -sched $SCHED -pause $DAEMON_PID >"$TMP/${p}_burst.json"
	metric "${p}_burst_cpu_s" "$(cpu_s $(($(cpu_ticks $DAEMON_PID) - c0)))"
	[[ $name == floor ]] || "$LB" logspan -first $B -count $N -log "$TMP/daemon.log" -since "$("$LB" jget "$TMP/${p}_burst.json" start_unix_nano)" >"$TMP/${p}_burst_log.json"
	metric "${p}_hwm_kib" "$(status_kib $DAEMON_PID VmHWM)"
	kill -0 $DAEMON_PID || { log "the $name daemon died"; exit 1; }
	stop_pid $DAEMON_PID
	DAEMON_PID=
	metric "${p}_log_warnings" "$(grep -c -E 'level=(WARN|ERROR)' "$TMP/daemon.log" || true)"
	metric "${p}_lost_uevents" "$(grep -c 'uevents were lost' "$TMP/daemon.log" || true)"
	remove_loops $B
}

# The ways alternate within a round, and which comes first alternates
# between rounds: a machine that slows down or speeds up during the run
# moves both sides of a ratio.
for ((r = 1; r <= REPS; r++)); do
	if ((r % 2 == 1)); then
		raw_round $r
		for name in "${DAEMONS[@]}"; do daemon_round $r "$name"; done
	else
		for name in "${DAEMONS[@]}"; do daemon_round $r "$name"; done
		raw_round $r
	fi
done

# ---------------------------------------------------------------- 3. at rest
log "iosched daemon: start, wait for READY=1"
start_daemon
metric daemon_ready_s "$(cat "$TMP/ready.txt")"

log "iosched daemon: $N loops at once, to have them managed"
bg "$LB" hotplug -first $B -count $N -sched $SCHED -pause $DAEMON_PID >"$TMP/daemon_burst.json"
wait_managed $N

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
metric hwm_kib "$(status_kib $DAEMON_PID VmHWM)"
kill -0 $DAEMON_PID || { log "the daemon died"; exit 1; }

log "iosched daemon: stop"
t0=$(now)
stop_pid $DAEMON_PID
metric daemon_stop_s "$(since "$t0")"
DAEMON_PID=
metric daemon_log_warnings "$(grep -c -E 'level=(WARN|ERROR)' "$TMP/daemon.log" || true)"
metric daemon_lost_uevents "$(grep -c 'uevents were lost' "$TMP/daemon.log" || true)"
remove_loops $B

# ---------------------------------------------------------------- 4. udevd
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

CREATED=0

# ---------------------------------------------------------------- report
mkdir -p "$RESULTS"
out=$RESULTS/bench-$(date -u +%Y%m%dT%H%M%SZ).json
echo
"$LB" report -dir "$TMP" -out "$out"
echo
echo "summary: $out"
