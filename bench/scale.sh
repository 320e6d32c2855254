#!/usr/bin/env bash
# scale.sh: what a key costs as the key count grows (issue 26): sluice serve
# with the memory store and with one private redis-server, side by side,
# one "10/1h exact" or "10/1h smooth" policy limit keyed on the sender, at
# 10^4, 10^5, 10^6 and 10^7 keys. Per step: bytes per key (RSS; Redis:
# used_memory), decisions/s and p99 at c=64, bytes written per second idle
# and under load, snapshot and restore times (bench/scale's doc says how
# each is taken). It writes docs/scale.svg and keeps the raw output in
# bench/results/scale-<date>.log.
#
#   bench/scale.sh                      every step (10^7 takes long)
#   MAXKEYS=1000000 bench/scale.sh      stop at 10^6
#   STEPS=1e4,1e5 DURATION=2s IDLE=5s bench/scale.sh
#
# Load generator, sluice and redis-server share this machine's CPUs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case ${1:-} in
-h | -help | --help) exec go run ./bench/scale -h ;;
esac
mkdir -p bench/results
out=bench/results/scale-$(date -u +%Y-%m-%dT%H%MZ).log
go run ./bench/scale "$@" 2>&1 | tee "$out"
echo "raw log: $out" >&2
