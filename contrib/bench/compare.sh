# contrib/bench/compare.sh: iosched against the other ways of setting a
# scheduler, on the same machine and the same 100, 500 and 1000 loop
# devices. Sourced by `run.sh compare` after its set-up (binaries built,
# preflight, policy.toml, the udevd ATTR rule in $TMP/rules, cleanup trap),
# whose functions and variables it uses. Not to be run on its own.
#
# For each N, the time from the moment a way can act on N loop devices that
# appeared at once to the last of them on mq-deadline:
#   raw         the N scheduler files written at once, a thread each (the floor)
#   iosched     the daemon, SIGSTOPped while the N are created, then SIGCONT
#   udevd_attr  a private systemd-udevd with an ATTR{queue/scheduler} rule, the same way
#   udevd_run   the same udevd with contrib/udev's RUN+="iosched apply $kernel" rule
#   seq         one thread writing the N files one after another (a RUN script)
#   tuned       tuned started with a [disk] elevator= profile while the N exist
# and what one `iosched apply` process costs (the RUN rule's price per event).
# Writes compare.txt in $TMP, then loopbench compare draws the figure.

SIZES=${SIZES:-100 500 1000}
TUNED=/usr/sbin/tuned
cmetric() { printf '%s\n' "$*" >>"$TMP/compare.txt"; }
remove_n() { bg "$LB" remove -first $A -count "$1" -parallel 64; }

if [[ ! -x $TUNED ]]; then
	log "installing Debian's tuned for the comparison"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tuned >/dev/null
fi
if pgrep -x tuned >/dev/null; then
	echo "run.sh compare: a tuned is running: it would act on the benchmark's loops too" >&2
	exit 1
fi

cmetric "info machine $(nproc) vCPU, kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%MZ)"
cmetric "info commit $(cd "$REPO" && git rev-parse --short=12 HEAD)"
cmetric "info udevd $("$UDEVD" --version | head -1)"
cmetric "info tuned $("$TUNED" --version 2>&1 | head -1)"
CREATED=1

# ------------------------------------------------ raw and sequential writers
for n in $SIZES; do
	log "raw: $n at once"
	bg "$LB" raw -first $A -count "$n" -sched $SCHED >"$TMP/c_raw_$n.json"
	cmetric "raw $n $("$LB" jget "$TMP/c_raw_$n.json" write_s)"
	cmetric "extra foreign_uevents_raw_$n $("$LB" jget "$TMP/c_raw_$n.json" foreign_uevents)"
	remove_n "$n"
	log "sequential writer: $n one after another"
	bg "$LB" seq -first $A -count "$n" -sched $SCHED >"$TMP/c_seq_$n.json"
	cmetric "seq $n $("$LB" jget "$TMP/c_seq_$n.json" write_s)"
	remove_n "$n"
done

# ------------------------------------------------ iosched daemon
log "iosched daemon: start"
start_daemon
for n in $SIZES; do
	log "iosched daemon: $n at once"
	bg "$LB" hotplug -first $A -count "$n" -sched $SCHED -pause $DAEMON_PID >"$TMP/c_iosched_$n.json"
	[[ $("$LB" jget "$TMP/c_iosched_$n.json" timed_out) == false ]] || cmetric "warning iosched $n timed out"
	cmetric "iosched $n $("$LB" jget "$TMP/c_iosched_$n.json" converge_s)"
	cmetric "extra foreign_uevents_iosched_$n $("$LB" jget "$TMP/c_iosched_$n.json" foreign_uevents)"
	remove_n "$n"
done
stop_pid $DAEMON_PID
DAEMON_PID=

# ------------------------------------------------ what one iosched apply costs
log "iosched apply: one process per disk, 20 already in place, 20 switching"
bg "$LB" create -first $A -count 21
bg "$LB" execcost -n 20 -- "$IOSCHED" apply --policy "$POLICY" "loop$A" >/dev/null # puts it in place
bg "$LB" execcost -n 20 -- "$IOSCHED" apply --policy "$POLICY" "loop$A" >"$TMP/c_apply_noop.json"
for i in $(seq 1 20); do
	"$LB" execcost -n 1 -- "$IOSCHED" apply --policy "$POLICY" "loop$((A + i))" >"$TMP/c_apply_switch_$i.json"
done
cmetric "extra apply_noop_wall_s $("$LB" jget "$TMP/c_apply_noop.json" wall_s)"
cmetric "extra apply_noop_cpu_s $("$LB" jget "$TMP/c_apply_noop.json" cpu_s)"
cmetric "extra apply_max_rss_kib $("$LB" jget "$TMP/c_apply_noop.json" max_rss_kib)"
cmetric "extra apply_switch_wall_s $(for i in $(seq 1 20); do "$LB" jget "$TMP/c_apply_switch_$i.json" wall_s; done | awk '{ s += $1 } END { printf "%.6f", s / NR }')"
cmetric "extra apply_switch_cpu_s $(for i in $(seq 1 20); do "$LB" jget "$TMP/c_apply_switch_$i.json" cpu_s; done | awk '{ s += $1 } END { printf "%.6f", s / NR }')"
remove_n 21

# ------------------------------------------------ systemd-udevd, two rules
mkdir -p "$TMP/rules-run"
# contrib/udev's rule as shipped, pointed at the benchmark's binary and
# policy, and narrowed to the benchmark's loops.
sed -e "s|RUN+=\"/usr/bin/iosched apply|KERNEL==\"$LOOPS\", RUN+=\"$IOSCHED --policy $POLICY apply|" \
	"$REPO/contrib/udev/60-iosched.rules" >"$TMP/rules-run/60-iosched.rules"
grep -qF "KERNEL==\"$LOOPS\"" "$TMP/rules-run/60-iosched.rules" || { log "contrib/udev/60-iosched.rules: no RUN+=\"/usr/bin/iosched apply\" to adapt"; exit 1; }
for kind in attr run; do
	rules=$TMP/rules
	[[ $kind == run ]] && rules=$TMP/rules-run
	log "systemd-udevd ($kind rule): start a private one"
	start_udevd "$rules"
	for n in $SIZES; do
		log "systemd-udevd ($kind rule): $n at once"
		bg "$LB" hotplug -first $A -count "$n" -sched $SCHED -pause $UDEVD_PID -children $UDEVD_PID >"$TMP/c_udevd_${kind}_$n.json"
		[[ $("$LB" jget "$TMP/c_udevd_${kind}_$n.json" timed_out) == false ]] || cmetric "warning udevd $kind $n timed out"
		cmetric "udevd_$kind $n $("$LB" jget "$TMP/c_udevd_${kind}_$n.json" converge_s)"
		cmetric "extra udevd_${kind}_max_workers_$n $("$LB" jget "$TMP/c_udevd_${kind}_$n.json" max_children)"
		cmetric "extra foreign_uevents_udevd_${kind}_$n $("$LB" jget "$TMP/c_udevd_${kind}_$n.json" foreign_uevents)"
		nsenter -t $UDEVD_PID -m udevadm settle -t 120
		remove_n "$n"
		nsenter -t $UDEVD_PID -m udevadm settle -t 120
	done
	stop_pid $UDEVD_PID
	UDEVD_PID=
done

# ------------------------------------------------ tuned
# tuned runs in a mount namespace of its own: /etc/tuned is a copy holding
# the benchmark's profile (only [disk] for the benchmark's loops) and a main
# configuration with dynamic tuning, sysctl re-application and the
# recommend command off, /run is a tmpfs; it logs to the work directory.
# --no-dbus: it needs no D-Bus for a profile given on its command line (its
# D-Bus interface is only for tuned-adm). It is SIGKILLed when done: on
# SIGTERM it would first put every loop back, one by one.
mkdir -p "$TMP/tuned-etc/iosched-bench"
cp -a /etc/tuned/. "$TMP/tuned-etc/"
cat >"$TMP/tuned-etc/tuned-main.conf" <<EOF
daemon = 1
dynamic_tuning = 0
sleep_interval = 1
update_interval = 10
recommend_command = 0
reapply_sysctl = 0
default_instance_priority = 0
udev_buffer_size = 1MB
EOF
cat >"$TMP/tuned-etc/iosched-bench/tuned.conf" <<EOF
[main]
summary=iosched benchmark: loop devices $A-$((B + N - 1)) only
[disk]
devices=$LOOPS
elevator=$SCHED
dynamic=0
EOF
for n in $SIZES; do
	log "tuned: start with $n loops present"
	bg "$LB" create -first $A -count "$n"
	t0=$(date +%s%N)
	unshare -m --propagation private -- sh -c '
		mount --bind "$1" /etc/tuned &&
		mount -t tmpfs -o mode=0755 tmpfs /run &&
		exec "$2" --no-dbus --no-socket --log "$3" --pid /run/tuned.pid --profile iosched-bench' \
		sh "$TMP/tuned-etc" "$TUNED" "$TMP/tuned-$n.log" >"$TMP/tuned-$n.out" 2>&1 &
	TUNED_PID=$!
	bg "$LB" watch -first $A -count "$n" -sched $SCHED -since "$t0" -timeout 300s >"$TMP/c_tuned_$n.json"
	kill -KILL $TUNED_PID 2>/dev/null
	wait $TUNED_PID 2>/dev/null || true
	TUNED_PID=
	[[ $("$LB" jget "$TMP/c_tuned_$n.json" timed_out) == false ]] || cmetric "warning tuned $n timed out"
	cmetric "tuned $n $("$LB" jget "$TMP/c_tuned_$n.json" converge_s)"
	cmetric "extra tuned_first_disk_s_$n $("$LB" jget "$TMP/c_tuned_$n.json" first_s)"
	remove_n "$n"
done
CREATED=0

# ------------------------------------------------ report
mkdir -p "$RESULTS"
out=$RESULTS/compare-$(date -u +%Y%m%dT%H%M%SZ).json
echo
"$LB" compare -dir "$TMP" -out "$out"
echo
echo "summary: $out (figure: ${out%.json}.svg, .png)"
