#!/usr/bin/env bash
# contrib/bench/probe-vs-fio.sh: iosched probe's engines against fio.
#
#   sudo contrib/bench/probe-vs-fio.sh
#
# On one loop device (number 7390, backed by a file in /dev/shm), for the
# schedulers none and mq-deadline: random 4 KiB O_DIRECT reads with io_uring
# at depth 32 and with psync from 8 readers, by fio and by `iosched probe`
# (its deep-queue measurement), runs alternating (fio first, then the probe
# first, ...). Prints each run's IOPS and CPU per read, then the medians and
# the probe/fio ratio of every run. Reads only; the device and its file are
# removed on every exit. See README.md ("probe against fio").
#
# Environment: RUNTIME (each measurement, default 2s), REPS (default 3),
# ONLY (io_uring or psync: that engine only), BATCHED=1 (also fio's io_uring
# submitting and reaping in batches).
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
	echo "probe-vs-fio.sh: must run as root: sudo $0" >&2
	exit 1
fi
if ! command -v go >/dev/null; then
	echo "probe-vs-fio.sh: go not found in PATH (sudo env PATH=\"\$PATH\" $0)" >&2
	exit 1
fi
if ! command -v fio >/dev/null; then
	apt-get update -qq && apt-get install -y -qq fio >/dev/null
fi

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd "$REPO" && go build -o "$WORK/iosched" ./cmd/iosched)
(cd "$HERE" && go build -o "$WORK/probevsfio" ./cmd/probevsfio) # a module of its own (go.mod here)
echo "fio $(fio --version | sed 's/^fio-//'), kernel $(uname -r), $(nproc) CPUs, iosched at $(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD || echo '+changes')" >&2
"$WORK/probevsfio" -iosched "$WORK/iosched" -runtime "${RUNTIME:-2s}" -reps "${REPS:-3}" -only "${ONLY:-}" -batched="${BATCHED:-0}"
