#!/usr/bin/env bash
# scale.sh: what a key costs as the key count grows (issue 26): sluice serve
# with the memory store and with one private redis-server, side by side,
# one "10/1h exact" or "10/1h smooth" policy limit keyed on the sender, at
# 10^4, 10^5, 10^6 and 10^7 keys. Per step: bytes per key (RSS; Redis:
# used_memory), decisions/s and p99 at c=64, bytes written per second idle
# and under load, snapshot and restore times (bench/scale's doc says how
# each is taken). It writes docs/scale.svg and keeps the raw output in
# bench/results/<date>-scale.txt.
#
# With -stall (or STALL=1) it measures instead the policy door's decisions
# while its redis-server is stopped by SIGSTOP for 2 s (deadline 50 ms,
# fail_mode open), alternating rounds with BASELINE=<binary> if given; the
# raw log is then bench/results/<date>-scale-stall.txt.
#
#   bench/scale.sh                      every step (10^7 takes long)
#   MAXKEYS=1000000 bench/scale.sh      stop at 10^6
#   STEPS=1e4,1e5 DURATION=2s IDLE=5s bench/scale.sh
#   BASELINE=/tmp/sluice-old bench/scale.sh -stall
#
# Load generator, sluice and redis-server share this machine's CPUs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case ${1:-} in
-h | -help | --help) exec go run ./bench/scale -h ;;
esac
mkdir -p bench/results
kind=scale
[[ ${STALL:-} == 1 || " $* " == *" -stall "* ]] && kind=scale-stall
out=bench/results/$(date -u +%Y-%m-%d-%H%M)-$kind.txt
go run ./bench/scale "$@" 2>&1 | tee "$out"
echo "raw log: $out" >&2
