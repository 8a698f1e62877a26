#!/usr/bin/env bash
# contrib/bench/adaptcost.sh: what the daemon's adaptive observation
# ([rule.adapt]) and the fleet's observation (observe) cost on real loop
# devices.
#
#   sudo contrib/bench/adaptcost.sh
#
# Creates 1000 loop devices (BASE to BASE+999, default 44000-44999), bound
# read-only to one sparse file in /dev/shm (so they have a size and share
# one probe key), writes a seeded probe-results file for that key (curves
# for none and mq-deadline, loopbench seed), and measures, in REPS rounds
# (default 2) whose order alternates, the CPU (utime+stime of the daemon,
# /proc/PID/stat) of a daemon built from this tree while nothing happens,
# for each way:
#   adapt100    100 disks with [rule.probe] + [rule.adapt] (sample 5s, window 10m)
#   base100     the same policy without [rule.adapt]
#   adapt1000   1000 disks, sample 5s
#   base1000    1000 disks without [rule.adapt]
#   adapt1000s1 1000 disks, sample 1s
#   observe1000 1000 disks, base1000's policy with observe = "5s"
#   observe1000io the same while every disk is read once a second
#               (loopbench touch: one 4 KiB read a disk), so that every
#               sample finds every disk's counters moved and the metrics
#               file is written after every pass
# Every way's daemon writes a metrics file (metrics_file), so the base
# ways show what a daemon costs when no rule asks for sampling.
# Each daemon has its own state and runtime directories and lock file; its
# policy matches only the loops of the way. A measurement starts once the
# state file shows every disk managed (and, with [rule.adapt], every disk
# with its adapt entry) and its sampler has taken two samples of every
# disk (the first opens 1000 stat files and takes the baselines, the
# second gives the metrics file every disk's series: once per disk, not
# the steady cost; a way that samples waits 2 sample intervals + 3 s,
# one that does not 3 s), and counts only seconds with no uevent near them
# (loopbench idle: others' devices come and go on a shared machine).
#
# Environment: WAYS (the ways to measure, default all), WINDOW (quiet
# seconds per measurement, default 60), REPS,
# BASE (a multiple of 2000; the range BASE to BASE+999 must be free), LOCK
# (a file to flock while loops exist, default /tmp/iosched-tests.lock;
# empty: none), RESULTS (default contrib/bench/results), KEEP=1.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
	echo "adaptcost.sh: must run as root" >&2
	exit 1
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RESULTS=${RESULTS:-$HERE/results}
WINDOW=${WINDOW:-60}
REPS=${REPS:-2}
BASE=${BASE:-44000}
LOCK=${LOCK-/tmp/iosched-tests.lock}
N=1000
if ! [[ $BASE =~ ^[1-9][0-9]{4}$ ]] || ((BASE % 2000 != 0)); then
	echo "adaptcost.sh: BASE=$BASE: want a multiple of 2000 from 10000 to 98000" >&2
	exit 2
fi
export IOSCHED_BENCH_BASE=$BASE
P=${BASE:0:2} # BASE ends in 000: loops BASE..BASE+999 are loop${P}[0-9][0-9][0-9]
GLOB1000="loop${P}[0-9][0-9][0-9]"
GLOB100="loop${P}0[0-9][0-9]"

TMP=$(mktemp -d /tmp/iosched-adaptcost.XXXXXX)
LB=$TMP/loopbench
IOSCHED=$TMP/iosched
IMG=
DAEMON_PID=
WAIT_PID=
TOUCH_PID=
CREATED=0

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	[[ -n $WAIT_PID ]] && kill "$WAIT_PID" 2>/dev/null && wait "$WAIT_PID" 2>/dev/null
	[[ -n $DAEMON_PID ]] && stop_pid "$DAEMON_PID"
	[[ -n $TOUCH_PID ]] && stop_pid "$TOUCH_PID"
	if ((CREATED)); then
		"$LB" unbind -first "$BASE" -count $N || log "WARNING: some loops in $BASE-$((BASE + N - 1)) could not be detached"
		"$LB" remove -first "$BASE" -count $N -parallel 64 || log "WARNING: some loops in $BASE-$((BASE + N - 1)) could not be removed"
	fi
	[[ -n $IMG ]] && rm -f "$IMG"
	if ((rc != 0)) || [[ ${KEEP:-0} == 1 ]]; then
		log "work directory kept: $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for n in $(seq "$BASE" $((BASE + N - 1))); do
	if [[ -e /sys/block/loop$n ]]; then
		echo "adaptcost.sh: loop$n exists: loops $BASE-$((BASE + N - 1)) must be free" >&2
		exit 1
	fi
done

log "building iosched (working tree) and loopbench in $TMP"
(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$IOSCHED" ./cmd/iosched)
(cd "$HERE" && go build -o "$LB" ./cmd/loopbench)
COMMIT=$(cd "$REPO" && git rev-parse --short=12 HEAD)$(cd "$REPO" && git diff --quiet HEAD -- . ':!contrib/bench' || echo +worktree)

if [[ -n $LOCK ]]; then
	log "waiting for the lock $LOCK"
	exec 9>"$LOCK"
	flock 9
fi

IMG=$(mktemp /dev/shm/iosched-adaptcost-XXXXXX.img)
truncate -s 64M "$IMG"
log "creating loops $BASE-$((BASE + N - 1)), bound read-only to $IMG"
CREATED=1
"$LB" create -first "$BASE" -count $N
"$LB" bind -first "$BASE" -count $N -file "$IMG"
mkdir -p "$TMP/seeds"
"$LB" seed -dev "loop$BASE" -out "$TMP/seeds/fleet.json"

# policy WAY: the policy file of a way, in a directory of its own (the
# daemon follows its policy's directory).
policy() {
	local way=$1 glob sample adapt=1 observe=
	case $way in
	adapt100) glob=$GLOB100 sample=5s ;;
	base100) glob=$GLOB100 adapt=0 ;;
	adapt1000) glob=$GLOB1000 sample=5s ;;
	base1000) glob=$GLOB1000 adapt=0 ;;
	adapt1000s1) glob=$GLOB1000 sample=1s ;;
	observe1000 | observe1000io) glob=$GLOB1000 adapt=0 observe=5s ;;
	esac
	mkdir -p "$TMP/etc-$way"
	{
		cat <<-EOF
			[[rule]]
			name = "adaptcost $way"
			${observe:+observe = \"$observe\"}
			[rule.match]
			name = ["$glob"]
			[rule.probe]
			candidates = ["none", "mq-deadline"]
			engine = "psync"
			depth = 32
			depths = [1, 2, 8, 32]
		EOF
		if ((adapt)); then
			printf '[rule.adapt]\nsample = "%s"\nwindow = "10m"\n' "$sample"
		fi
		printf '[daemon]\nprobe_results = ["%s"]\nmetrics_file = "%s"\n' "$TMP/seeds/*.json" "$TMP/metrics-$way.prom"
	} >"$TMP/etc-$way/policy.toml"
	"$IOSCHED" check --policy "$TMP/etc-$way/policy.toml" >/dev/null
	echo "$TMP/etc-$way/policy.toml"
}

# measure WAY R: a fresh daemon of the way, until its disks are all
# managed (and adaptive), then its CPU over WINDOW quiet seconds.
measure() {
	local way=$1 r=$2 pol want adapt=0 i got settle=3
	pol=$(policy "$way")
	case $way in *100) want=100 ;; *) want=1000 ;; esac
	case $way in adapt*) adapt=$want ;; esac
	case $way in adapt1000s1) settle=5 ;; adapt* | observe*) settle=13 ;; esac
	rm -rf "$TMP/run" "$TMP/state"
	mkdir -p "$TMP/run" "$TMP/state"
	if [[ $way == *io ]]; then
		"$LB" touch -first "$BASE" -count $N -every 1s &
		TOUCH_PID=$!
	fi
	"$LB" waitready -socket "$TMP/notify.sock" -timeout 120s >/dev/null &
	WAIT_PID=$!
	for ((i = 0; i < 200; i++)); do [[ -S $TMP/notify.sock ]] && break; sleep 0.01; done
	NOTIFY_SOCKET="$TMP/notify.sock" "$IOSCHED" daemon --policy "$pol" \
		--runtime-dir "$TMP/run" --state-dir "$TMP/state" --lock-file "$TMP/disks.lock" \
		2>"$TMP/daemon-$way-r$r.log" &
	DAEMON_PID=$!
	wait "$WAIT_PID"
	WAIT_PID=
	rm -f "$TMP/notify.sock"
	for ((i = 0; i < 600; i++)); do
		got=$("$LB" adaptive -state "$TMP/run/state.json" 2>/dev/null || true)
		[[ $got == "$want $adapt" ]] && break
		sleep 0.1
	done
	if [[ $got != "$want $adapt" ]]; then
		log "$way: the state file shows '$got' (managed, adaptive), want '$want $adapt' after 60 s"
		exit 1
	fi
	log "round $r: $way: $want disks managed, $adapt adaptive; settling ${settle}s, measuring $WINDOW quiet seconds"
	"$LB" idle -pid "$DAEMON_PID" -settle "${settle}s" -quiet "$WINDOW" -max $((3 * WINDOW)) >"$TMP/$way-r$r.json"
	kill -0 "$DAEMON_PID" || { log "$way: the daemon died"; exit 1; }
	stop_pid "$DAEMON_PID"
	DAEMON_PID=
	if [[ -n $TOUCH_PID ]]; then
		kill -0 "$TOUCH_PID" || { log "$way: the reader died"; exit 1; }
		stop_pid "$TOUCH_PID"
		TOUCH_PID=
	fi
	if grep -q 'level=ERROR' "$TMP/daemon-$way-r$r.log"; then
		log "$way: errors in the daemon's log:"
		grep 'level=ERROR' "$TMP/daemon-$way-r$r.log" | head -5 >&2
		exit 1
	fi
	printf '%s %s %s %s %s %s\n' "$way" "$r" \
		"$("$LB" jget "$TMP/$way-r$r.json" quiet_seconds)" \
		"$("$LB" jget "$TMP/$way-r$r.json" quiet_ticks)" \
		"$("$LB" jget "$TMP/$way-r$r.json" all_ticks)" \
		"$(cut -d' ' -f1 /proc/loadavg)" >>"$TMP/raw.txt"
}

for ((r = 1; r <= REPS; r++)); do
	if ((r % 2 == 1)); then
		ways=(adapt100 base100 adapt1000 base1000 adapt1000s1 observe1000 observe1000io)
	else
		ways=(observe1000io observe1000 adapt1000s1 base1000 adapt1000 base100 adapt100)
	fi
	for w in "${ways[@]}"; do
		[[ -z ${WAYS:-} || " $WAYS " == *" $w "* ]] && measure "$w" "$r"
	done
done

"$LB" unbind -first "$BASE" -count $N
"$LB" remove -first "$BASE" -count $N -parallel 64
CREATED=0
exec 9>&- 2>/dev/null || true

mkdir -p "$RESULTS"
out=$RESULTS/adaptcost-$(date -u +%Y%m%dT%H%MZ).txt
hz=$(getconf CLK_TCK)
{
	echo "# adaptcost.sh: iosched $COMMIT, $(nproc) CPUs, kernel $(uname -r), $REPS rounds of $WINDOW quiet s after 2 samples, USER_HZ $hz"
	echo "# way round quiet_s quiet_ticks all_ticks load1 (the machine's 1-minute load average after the way)"
	cat "$TMP/raw.txt"
	echo "# totals over the rounds: ticks per 10 s and % of one CPU, over the quiet seconds"
	awk -v hz="$hz" '{ s[$1] += $3; t[$1] += $4 } END {
		n = split("adapt100 base100 adapt1000 base1000 adapt1000s1 observe1000 observe1000io", w, " ")
		for (i = 1; i <= n; i++) if (s[w[i]] > 0)
			printf "%-12s %4d s %5d ticks  %6.2f ticks/10s  %6.3f%% CPU\n", w[i], s[w[i]], t[w[i]], t[w[i]] * 10 / s[w[i]], t[w[i]] * 100 / hz / s[w[i]]
		if (s["adapt100"] > 0) {
			a100 = t["adapt100"] * 10 / s["adapt100"]
			printf "target: 100 disks <= 2 ticks/10s: %s (%.2f)\n", a100 <= 2 ? "PASS" : "FAIL", a100
		}
		if (s["adapt1000"] > 0) {
			p1000 = t["adapt1000"] * 100 / hz / s["adapt1000"]
			printf "target: 1000 disks at 5s < 0.5%% of one CPU: %s (%.3f%%)\n", p1000 < 0.5 ? "PASS" : "FAIL", p1000
		}
		if (s["observe1000"] > 0) {
			o1000 = t["observe1000"] * 100 / hz / s["observe1000"]
			printf "target: observe, 1000 disks at 5s < 0.5%% of one CPU: %s (%.3f%%)\n", o1000 < 0.5 ? "PASS" : "FAIL", o1000
		}
		if (s["observe1000io"] > 0) {
			oio = t["observe1000io"] * 100 / hz / s["observe1000io"]
			printf "target: observe, 1000 disks in use at 5s < 0.5%% of one CPU: %s (%.3f%%)\n", oio < 0.5 ? "PASS" : "FAIL", oio
		}
		if (s["base100"] + s["base1000"] > 0)
			printf "target: no rule asks (no adapt, no observe), 0 ticks: %s (%d + %d ticks)\n", t["base100"] + t["base1000"] == 0 ? "PASS" : "FAIL", t["base100"], t["base1000"]
	}' "$TMP/raw.txt"
} | tee "$out"
echo "results: $out"
