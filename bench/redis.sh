#!/usr/bin/env bash
# redis.sh: what sharing limits through Redis costs. The same policy load as
# bench/policy.sh (bench/policyload, c=64, one sender rule counted at
# END-OF-MESSAGE) against sluice with its in-memory store and against sluice
# with the Redis store (a private redis-server on a loopback port), rounds
# interleaved, medians; then the raw store decisions per second
# (go test -bench in internal/store/redis). The last line is
# "redis ratio redis/memory c=64: X.XX"; the absolute Redis figure is
# printed beside it (the issue's target: >= 30k policy decisions/s).
#
#   bench/redis.sh            5 s per run, 3 rounds
#   QUICK=1 bench/redis.sh    1 s per run, 1 round
#
# Load generator, sluice and redis-server share this machine's CPUs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

if [[ ${QUICK:-0} == 1 ]]; then
	DURATION=1s ROUNDS=1 BENCHTIME=1s
else
	DURATION=${DURATION:-5s} ROUNDS=${ROUNDS:-3} BENCHTIME=${BENCHTIME:-3s}
fi
C=64
command -v redis-server >/dev/null || die "redis-server is not installed (Debian package redis-server)"

tmp=$(mktemp -d /tmp/sluice-bench-redis.XXXXXX)
pids=()
cleanup() {
	local rc=$? p
	for p in "${pids[@]}"; do stop_pid "$p" 10; done
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

log "building sluice and policyload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/policyload" ./bench/policyload

rport=$(free_port)
mkdir "$tmp/redis-server"
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis-server" --save "" --appendonly no \
	--daemonize no --logfile "$tmp/redis-server/redis.log" &
pids+=($!)
for ((i = 0; i < 100; i++)); do
	redis-cli -p "$rport" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$rport" ping >/dev/null 2>&1 || die "redis-server did not start"

declare -A port=()
for store in memory redis; do
	port[$store]=$(free_port)
	mkdir -m 0700 "$tmp/$store"
	{
		echo "state_dir = \"$tmp/$store\""
		if [[ $store == redis ]]; then
			printf '[store]\nkind = "redis"\n[store.redis]\naddrs = ["127.0.0.1:%s"]\n' "$rport"
		fi
		cat <<TOML
[anvil]
enabled = false
[throttle]
enabled = false
[policy]
listen = ["inet:127.0.0.1:${port[$store]}"]
[[policy.rule]]
name = "sender-rate"
count = "messages"
key = ["sender"]
limit = ["1000/60s exact"]
TOML
	} >"$tmp/$store.toml"
	"$tmp/sluice" serve -c "$tmp/$store.toml" </dev/null >"$tmp/$store.log" 2>&1 &
	pids+=($!)
done
for store in memory redis; do
	for ((i = 0; i < 100; i++)); do
		(echo >"/dev/tcp/127.0.0.1/${port[$store]}") 2>/dev/null && break
		sleep 0.1
	done
done

declare -A rps=() p99=()
for ((round = 1; round <= ROUNDS; round++)); do
	order=(memory redis)
	((round % 2)) || order=(redis memory)
	for store in "${order[@]}"; do
		out=$("$tmp/policyload" -addr "127.0.0.1:${port[$store]}" -c "$C" -duration "$DURATION" -label "$store")
		echo "round $round: $out"
		rps[$store]+=" $(field "$out" rps)"
		p99[$store]+=" $(field "$out" p99_us)"
	done
done

echo
log "raw store decisions (go test -bench, $BENCHTIME each)"
go test -run '^$' -bench 'BenchmarkHit' -benchtime "$BENCHTIME" ./internal/store/redis/ ./internal/store/memory/ 2>&1 |
	awk '/^Benchmark/ { printf "%-40s %12s ns/op  %10.0f decisions/s\n", $1, $3, 1e9 / $3 }'

echo
# shellcheck disable=SC2086 # the value lists split on purpose
m=$(median ${rps[memory]}) r=$(median ${rps[redis]})
# shellcheck disable=SC2086
printf 'policy decisions/s at c=%d: memory %.0f (p99 %.0f us), redis %.0f (p99 %.0f us)\n' "$C" "$m" "$(median ${p99[memory]})" "$r" "$(median ${p99[redis]})"
awk -v r="$r" -v m="$m" -v c="$C" 'BEGIN { printf "redis ratio redis/memory c=%s: %.2f\n", c, (m > 0 ? r / m : 0) }'
