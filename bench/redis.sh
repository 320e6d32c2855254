#!/usr/bin/env bash
# redis.sh: what sharing limits through Redis costs. The same policy load as
# bench/policy.sh (bench/policyload, c=64, one sender rule counted at
# END-OF-MESSAGE) against sluice with its in-memory store, with the Redis
# store on one private redis-server, and with the Redis store on a private
# Redis Cluster of three masters (cluster = true; loopback ports), rounds
# interleaved, medians; then the raw store decisions per second
# (go test -bench in internal/store/redis: one Redis, and clusters of one
# and three masters). A second sluice on the cluster
# joins the first for an exactness probe: 100 messages of one sender at
# c=8 (four policyload -probe connections to each daemon) against a
# 10/60s exact rule must admit exactly 10. The last lines are
# "redis ratio cluster3/redis c=64: X.XX" (three masters vs one) and
# "redis ratio redis/memory c=64: X.XX"; the absolute figures are printed
# above them (the issue's target: >= 30k policy decisions/s).
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
command -v redis-cli >/dev/null || die "redis-cli is not installed (Debian package redis-tools)"

tmp=$(mktemp -d /tmp/sluice-bench-redis.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do stop_pid "$p" 10; done
	rm -rf "$tmp"
}
on_exit cleanup

# pick_port VAR sets VAR to a free port below the ephemeral range
# (bench/lib.sh, free_tcp_port), none this script has picked before.
taken=()
pick_port() {
	local picked
	picked=$(free_tcp_port "${taken[@]}") || die "no free TCP port"
	taken+=("$picked")
	printf -v "$1" '%s' "$picked"
}

log "building sluice and policyload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/policyload" ./bench/policyload

pick_port rport
mkdir "$tmp/redis-server"
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis-server" --save "" --appendonly no \
	--daemonize no --logfile "$tmp/redis-server/redis.log" &
pids+=($!)
for ((i = 0; i < 100; i++)); do
	redis-cli -p "$rport" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$rport" ping >/dev/null 2>&1 || die "redis-server did not start"

# Three cluster nodes, no replicas, all slots spread by redis-cli.
cnodes=()
for i in 0 1 2; do
	# The cluster bus gets a free port of its own (its default, the port
	# + 10000, may be taken or past 65535).
	pick_port p
	pick_port bus
	mkdir "$tmp/cnode$i"
	redis-server --port "$p" --bind 127.0.0.1 --dir "$tmp/cnode$i" --save "" --appendonly no \
		--daemonize no --logfile "$tmp/cnode$i/redis.log" \
		--cluster-enabled yes --cluster-config-file "$tmp/cnode$i/nodes.conf" --cluster-port "$bus" &
	pids+=($!)
	cnodes+=("127.0.0.1:$p")
done
for node in "${cnodes[@]}"; do
	for ((i = 0; i < 100; i++)); do
		redis-cli -p "${node##*:}" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
done
redis-cli --cluster create "${cnodes[@]}" --cluster-replicas 0 --cluster-yes >"$tmp/cluster-create.log" 2>&1 ||
	die "redis-cli --cluster create failed: $(cat "$tmp/cluster-create.log")"
for node in "${cnodes[@]}"; do
	for ((i = 0; i < 100; i++)); do
		[[ $(redis-cli -p "${node##*:}" cluster info 2>/dev/null | tr -d '\r' | grep cluster_state) == cluster_state:ok ]] && break
		sleep 0.1
	done
done
caddrs=$(printf '"%s", ' "${cnodes[@]}")

stores=(memory redis cluster3)
declare -A port=()
for store in "${stores[@]}" cluster3b; do
	pick_port "port[$store]"
	mkdir -m 0700 "$tmp/$store"
	{
		echo "state_dir = \"$tmp/$store\""
		case $store in
		redis) printf '[store]\nkind = "redis"\n[store.redis]\naddrs = ["127.0.0.1:%s"]\n' "$rport" ;;
		cluster3*) printf '[store]\nkind = "redis"\n[store.redis]\naddrs = [%s]\ncluster = true\n' "${caddrs%, }" ;;
		esac
		cat <<TOML
[anvil]
enabled = false
[throttle]
enabled = false
[policy]
listen = ["inet:127.0.0.1:${port[$store]}"]
[[policy.rule]]
name = "probe-rate"
sender_domain = ["probe.example"]
count = "messages"
key = ["sender"]
limit = ["10/60s exact"]
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
for store in "${stores[@]}" cluster3b; do
	for ((i = 0; i < 100; i++)); do
		(echo >"/dev/tcp/127.0.0.1/${port[$store]}") 2>/dev/null && break
		sleep 0.1
	done
done

declare -A rps=() p99=()
for ((round = 1; round <= ROUNDS; round++)); do
	order=("${stores[@]}")
	((round % 2)) || order=(cluster3 redis memory)
	for store in "${order[@]}"; do
		out=$("$tmp/policyload" -addr "127.0.0.1:${port[$store]}" -c "$C" -duration "$DURATION" -label "$store")
		echo "round $round: $out"
		rps[$store]+=" $(field "$out" rps)"
		p99[$store]+=" $(field "$out" p99_us)"
	done
done

# Exactness over two daemons on the cluster: 100 messages of one sender at
# c=8, four connections to each daemon, 12 or 13 messages each.
probe_out=() probe_pids=()
for ((i = 0; i < 8; i++)); do
	target=cluster3
	((i % 2)) && target=cluster3b
	n=$((i < 4 ? 13 : 12))
	"$tmp/policyload" -addr "127.0.0.1:${port[$target]}" -probe "$n" -probe-sender "exact@probe.example" \
		-label "$target" >"$tmp/probe$i.out" 2>&1 &
	probe_pids+=($!)
	probe_out+=("$tmp/probe$i.out")
done
for p in "${probe_pids[@]}"; do wait "$p" || true; done
admitted=0 sent=0
for f in "${probe_out[@]}"; do
	line=$(grep -m1 'admitted=' "$f") || die "policyload -probe failed: $(cat "$f")"
	admitted=$((admitted + $(field "$line" admitted)))
	sent=$((sent + $(field "$line" probe)))
done

echo
log "raw store decisions (go test -bench, $BENCHTIME each)"
go test -run '^$' -bench 'BenchmarkHit' -benchtime "$BENCHTIME" ./internal/store/redis/ ./internal/store/memory/ 2>&1 |
	awk '/^Benchmark/ { printf "%-40s %12s ns/op  %10.0f decisions/s\n", $1, $3, 1e9 / $3 }'

echo
# shellcheck disable=SC2086 # the value lists split on purpose
m=$(median ${rps[memory]}) r=$(median ${rps[redis]}) k=$(median ${rps[cluster3]})
# shellcheck disable=SC2086
printf 'policy decisions/s at c=%d: memory %.0f (p99 %.0f us), redis %.0f (p99 %.0f us), cluster of 3 masters %.0f (p99 %.0f us)\n' \
	"$C" "$m" "$(median ${p99[memory]})" "$r" "$(median ${p99[redis]})" "$k" "$(median ${p99[cluster3]})"
printf 'cluster exactness: two daemons, one sender, c=8: admitted %d of %d (10 expected)\n' "$admitted" "$sent"
awk -v k="$k" -v r="$r" -v c="$C" 'BEGIN { printf "redis ratio cluster3/redis c=%s: %.2f\n", c, (r > 0 ? k / r : 0) }'
awk -v r="$r" -v m="$m" -v c="$C" 'BEGIN { printf "redis ratio redis/memory c=%s: %.2f\n", c, (m > 0 ? r / m : 0) }'
((admitted == 10)) || die "the cluster admitted $admitted of $sent messages of one sender, not 10"
