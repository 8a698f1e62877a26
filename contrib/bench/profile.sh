#!/usr/bin/env bash
# contrib/bench/profile.sh: where the daemon's time goes while 1000 loop
# devices appear, one after another (hot-plug) and all at once (burst).
#
#   sudo contrib/bench/profile.sh [OUT]    # default OUT: a new /tmp/iosched-profile.XXXXXX
#
# For each of the two scenarios, a daemon of its own (the benchmark's policy,
# as run.sh) runs with IOSCHED_PROFILE_DIR=OUT/SCENARIO, which writes its
# pprof CPU, block, mutex, heap, goroutine and threadcreate profiles there
# when it stops; and `perf record -a -g` (when perf is installed) samples
# the whole machine, the kernel included, while the loops are created and
# handled: OUT/SCENARIO/perf.data. /proc/PID/sched of the daemon before and
# after goes to OUT/SCENARIO/sched-{before,after}.txt; `perf stat` of the
# daemon's context switches, migrations and CPU to perfstat.txt, its most
# threads at once (sampled every 5 ms) to threads-peak.txt. Read them with
#   go tool pprof -top OUT/hotplug/cpu.pprof   (block.pprof, mutex.pprof ...)
#   perf report -i OUT/hotplug/perf.data --no-children --sort sym
# The build is not stripped (perf needs its symbols), so its memory is not
# the package's: run.sh measures that. Loops: BASE to BASE+999 (default
# 40000, as run.sh); the same safety as run.sh (refuses loops that exist,
# removes its own on every exit).
set -euo pipefail

[[ $(id -u) -eq 0 ]] || { echo "profile.sh: must run as root" >&2; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-$(mktemp -d /tmp/iosched-profile.XXXXXX)}
BASE=${BASE:-40000}
N=1000
SCHED=mq-deadline
if ! [[ $BASE =~ ^[1-9][0-9]{4}$ ]] || ((BASE % 2000 != 0)); then
	echo "profile.sh: BASE=$BASE: want a multiple of 2000 from 10000 to 98000" >&2
	exit 2
fi
export IOSCHED_BENCH_BASE=$BASE
LOOPS="loop${BASE:0:1}[${BASE:1:1}$((${BASE:1:1} + 1))][0-9][0-9][0-9]"
TMP=$(mktemp -d /tmp/iosched-profile-work.XXXXXX)
LB=$TMP/loopbench
IOSCHED=$TMP/iosched
DAEMON_PID=
PERF_PID=

log() { printf '%s %s\n' "$(date +%T.%3N)" "$*" >&2; }
cleanup() {
	local rc=$?
	set +e
	[[ -n $PERF_PID ]] && kill -INT "$PERF_PID" 2>/dev/null && wait "$PERF_PID"
	[[ -n $DAEMON_PID ]] && kill -CONT "$DAEMON_PID" 2>/dev/null && kill -TERM "$DAEMON_PID" && wait "$DAEMON_PID"
	[[ -x $LB ]] && "$LB" remove -first "$BASE" -count $N -parallel 64
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for n in $(seq "$BASE" $((BASE + N - 1))); do
	[[ -e /sys/block/loop$n ]] && { echo "profile.sh: loop$n exists" >&2; exit 1; }
done
if pgrep -x systemd-udevd >/dev/null; then
	echo "profile.sh: a systemd-udevd runs: it would act on the loops too" >&2
	exit 1
fi
log "building iosched (working tree, with symbols) and loopbench"
(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$IOSCHED" ./cmd/iosched)
(cd "$HERE" && go build -o "$LB" ./cmd/loopbench)
mkdir -p "$TMP/etc" "$OUT"
cat >"$TMP/etc/policy.toml" <<POL
[[rule]]
name = "bench loops: $SCHED"
[rule.match]
class = "loop"
name = "$LOOPS"
[rule.set]
scheduler = "$SCHED"
POL

# profile SCENARIO: a daemon profiled while loopbench creates the loops,
# with the daemon running (hotplug) or stopped until all exist (burst).
profile() {
	local name=$1 dir=$OUT/$1
	mkdir -p "$dir" "$TMP/run-$name" "$TMP/state-$name"
	"$LB" waitready -socket "$TMP/notify.sock" -timeout 60s >/dev/null &
	local wait_pid=$!
	for ((i = 0; i < 200; i++)); do [[ -S $TMP/notify.sock ]] && break; sleep 0.01; done
	IOSCHED_PROFILE_DIR=$dir NOTIFY_SOCKET=$TMP/notify.sock "$IOSCHED" daemon --policy "$TMP/etc/policy.toml" \
		--runtime-dir "$TMP/run-$name" --state-dir "$TMP/state-$name" 2>"$dir/daemon.log" &
	DAEMON_PID=$!
	wait "$wait_pid"
	rm -f "$TMP/notify.sock"
	cat "/proc/$DAEMON_PID/sched" >"$dir/sched-before.txt"
	if [[ ${PERF:-1} == 1 ]] && command -v perf >/dev/null; then
		perf record -q -a -g -o "$dir/perf.data" 2>"$dir/perf.log" &
		PERF_PID=$!
		sleep 0.5 # perf is sampling
	fi
	# The daemon's context switches and CPU over the scenario (its
	# threads and those they start), and its threads at most, sampled
	# every 5 ms.
	local stat_pid= threads_pid=
	if command -v perf >/dev/null; then
		perf stat -e context-switches,cpu-migrations,task-clock -p "$DAEMON_PID" -o "$dir/perfstat.txt" &
		stat_pid=$!
	fi
	(
		# Builtins only (a 5 ms timeout on a pipe that never speaks
		# for a sleep): no process started every sample.
		exec {never}<> <(:)
		peak=0
		while [[ -e /proc/$DAEMON_PID/status ]]; do
			while read -r k v _; do
				[[ $k == Threads: ]] && break
			done <"/proc/$DAEMON_PID/status" 2>/dev/null || break
			((${v:-0} > peak)) && peak=$v && echo "$peak" >"$dir/threads-peak.txt"
			read -r -t 0.005 -u "$never" _ || true
		done
	) &
	threads_pid=$!
	local args=(hotplug -first "$BASE" -count $N -sched $SCHED)
	[[ $name == burst ]] && args+=(-pause "$DAEMON_PID")
	log "$name: loopbench ${args[*]}"
	"$LB" "${args[@]}" >"$dir/loopbench.json"
	if [[ -n $PERF_PID ]]; then
		kill -INT "$PERF_PID"
		wait "$PERF_PID" || true
		PERF_PID=
	fi
	[[ -n $stat_pid ]] && kill -INT "$stat_pid" && wait "$stat_pid" || true
	kill "$threads_pid" 2>/dev/null; wait "$threads_pid" 2>/dev/null || true
	cat "/proc/$DAEMON_PID/sched" >"$dir/sched-after.txt"
	grep -E '^(VmHWM|VmRSS|Threads)' "/proc/$DAEMON_PID/status" >"$dir/status.txt"
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || true
	DAEMON_PID=
	"$LB" remove -first "$BASE" -count $N -parallel 64
	log "$name: $(tr -d ' \n' <"$dir/loopbench.json" | head -c 300)"
}

profile hotplug
profile burst
log "profiles in $OUT"
