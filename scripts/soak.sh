#!/usr/bin/env bash
# Soak test: runs `sluice serve` under high load on the policy, anvil,
# throttle and milter doors for DURATION (default 10m), samples the
# daemon's goroutine count (Prometheus go_goroutines from [web] /metrics),
# RSS, threads and open descriptors every INTERVAL (default 10s), prints
# the table, and asserts a plateau: the maximum over the last third of the
# samples may exceed the maximum over the first third by at most 20 % plus
# a slack (goroutines 50, RSS 16 MiB, descriptors 50). It also fails if a
# load driver reports errors or the daemon dies. Last line: PASS or FAIL.
#
# The load: bench/policyload (C_POLICY persistent connections, default 16,
# realistic END-OF-MESSAGE requests over 1,000 clients and senders),
# bench/anvilload (C_ANVIL, default 8, 1,000 clients) and
# bench/throttleload (C_THROTTLE, default 8 senders, 1,000 keys, decision
# path only: -wait=false) and
# bench/milterload sessions (C_MILTER, default 8 whole milter sessions of 2
# messages at a time, 1,000 clients in the class "soak" capped at 6
# sessions, so some are refused with 421), each in rounds of ROUND
# (default 30s) so connections also churn between rounds.
#
# The machine is shared: check `uptime` first and do not run a long soak
# while others measure benchmarks.
#
# Environment: DURATION (10m), INTERVAL (10s), ROUND (30s), C_POLICY,
# C_ANVIL, C_THROTTLE, C_MILTER, KEEP=1 keeps the temp directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

DURATION=${DURATION:-10m}
INTERVAL=${INTERVAL:-10s}
ROUND=${ROUND:-30s}
C_POLICY=${C_POLICY:-16}
C_ANVIL=${C_ANVIL:-8}
C_THROTTLE=${C_THROTTLE:-8}
C_MILTER=${C_MILTER:-8}

secs() { # secs 10m -> 600
	local v=$1
	case $v in
	*h) echo $((${v%h} * 3600)) ;;
	*m) echo $((${v%m} * 60)) ;;
	*s) echo "${v%s}" ;;
	*) echo "$v" ;;
	esac
}
dur_s=$(secs "$DURATION")
int_s=$(secs "$INTERVAL")

tmp=$(mktemp -d /tmp/sluice-soak.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "${KEEP:-}" = 1 ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

log "machine: $(nproc) cores, load average:$(uptime | sed 's/.*load average://')"
# The machine is shared: a benchmark being measured (bench/*.sh run from
# /tmp/sluice-bench-*) must not get a soak beside it.
if [ "${FORCE:-}" != 1 ] && pgrep -f '/tmp/sluice-bench' >/dev/null; then
	die "a benchmark is running (pgrep -f /tmp/sluice-bench); wait for it, or FORCE=1"
fi
log "building sluice and the load drivers in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/policyload" ./bench/policyload
go build -o "$tmp/anvilload" ./bench/anvilload
go build -o "$tmp/throttleload" ./bench/throttleload
go build -o "$tmp/milterload" ./bench/milterload

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$tmp/sluice.toml" <<TOML
state_dir = "$tmp"
[log]
level = "warn"
[[class]]
name = "soak"
match = ["10.0.0.0/8"]
refuse = 6
[[class]]
name = "rest"
match = ["*"]
[anvil]
listen = ["unix:anvil"]
[anvil.smtpd]
client_connection_count_limit = 50
client_connection_rate_limit = 600
client_message_rate_limit = 600
[policy]
listen = ["inet:127.0.0.1:$port"]
[[policy.rule]]
name = "sender"
count = "messages"
key = ["sender"]
limit = ["100/60s exact", "1000/1h smooth"]
[[policy.rule]]
name = "client"
count = "recipients"
key = ["client_address/24/64"]
limit = ["500/60s anvil"]
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relays"
match = ["*"]
limit = "50/1s"
margin = "0s"
max_wait = "24h"
[milter]
listen = ["unix:milter"]
[web]
listen = ["unix:web"]
TOML
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 &
sluice_pid=$!
pids+=("$sluice_pid")
for s in anvil throttle milter web; do wait_for_socket "$tmp/$s" 20 "$sluice_pid" || { cat "$tmp/sluice.log" >&2; exit 1; }; done

end=$(($(date +%s) + dur_s))
# driver NAME CMD... runs CMD -duration ROUND until the end time, one
# result line per round in $tmp/NAME.out; failed rounds in $tmp/NAME.fail.
driver() {
	local name=$1 child=
	shift
	trap 'kill $child 2>/dev/null; exit 0' TERM
	while [ "$(date +%s)" -lt "$end" ]; do
		"$@" -duration "$ROUND" >>"$tmp/$name.out" 2>>"$tmp/$name.err" &
		child=$!
		if ! wait "$child"; then
			echo "round failed" >>"$tmp/$name.fail"
		fi
	done
}
driver policy "$tmp/policyload" -addr "127.0.0.1:$port" -c "$C_POLICY" -warmup 0s &
pids+=($!)
driver anvil "$tmp/anvilload" -socket "$tmp/anvil" -c "$C_ANVIL" -warmup 0s &
pids+=($!)
driver throttle "$tmp/throttleload" -socket "$tmp/throttle" -c "$C_THROTTLE" -wait=false &
pids+=($!)
driver milter "$tmp/milterload" sessions -socket "$tmp/milter" -c "$C_MILTER" &
pids+=($!)

metric() { # metric NAME: a sample from /metrics
	# awk reads to the end: exiting at the match would make curl fail with
	# a write error (23) once /metrics outgrows a pipe buffer, and end the
	# soak under set -e.
	curl -s --max-time 5 --unix-socket "$tmp/web" http://sluice/metrics | awk -v m="$1" '$1 == m && !found { print $2; found = 1 }'
}
status() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$sluice_pid/status"; }

log "soak: $DURATION of load, a sample every $INTERVAL (policy c=$C_POLICY, anvil c=$C_ANVIL, throttle c=$C_THROTTLE, milter c=$C_MILTER)"
printf '%8s %11s %10s %8s %8s %8s\n' elapsed goroutines rss_kib threads fds cpu_s | tee "$tmp/samples"
start=$(date +%s)
died=0
while :; do
	sleep "$int_s"
	now=$(date +%s)
	if ! kill -0 "$sluice_pid" 2>/dev/null; then
		died=1
		break
	fi
	g=$(metric go_goroutines)
	cpu=$(metric process_cpu_seconds_total)
	printf '%8s %11s %10s %8s %8s %8.1f\n' "$((now - start))s" "${g%.*}" "$(status VmRSS)" "$(status Threads)" \
		"$(find "/proc/$sluice_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)" "${cpu:-0}" | tee -a "$tmp/samples"
	[ "$now" -ge "$end" ] && break
done
wait "${pids[@]:1}" 2>/dev/null || true

fail=()
[ "$died" = 1 ] && fail+=("sluice died: $(tail -5 "$tmp/sluice.log")")
for d in policy anvil throttle milter; do
	rounds=0 nfail=0
	[ -f "$tmp/$d.out" ] && rounds=$(wc -l <"$tmp/$d.out")
	[ -f "$tmp/$d.fail" ] && nfail=$(wc -l <"$tmp/$d.fail")
	log "$d: $rounds rounds, $nfail failed; last: $(tail -1 "$tmp/$d.out" 2>/dev/null)"
	[ "$nfail" -gt 0 ] && fail+=("$d driver: $nfail failed rounds: $(tail -3 "$tmp/$d.err" 2>/dev/null)")
done
# Totals across rounds: requests and errors.
awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "reqs" || kv[1] == "grants") r += kv[2]; if (kv[1] == "sessions" || kv[1] == "tempfail") m += kv[2]; if (kv[1] == "errors") e += kv[2] } }
	END { printf "load total: %d requests/grants, %d milter sessions, %d errors\n", r, m, e }' "$tmp"/policy.out "$tmp"/anvil.out "$tmp"/throttle.out "$tmp"/milter.out >&2 || true

# Plateau: max of the last third vs max of the first third.
plateau=$(awk 'NR > 1 { n++; g[n] = $2; r[n] = $3; f[n] = $5 }
	END {
		if (n < 3) { print "too few samples (" n ")"; exit }
		t = int(n / 3)
		for (i = 1; i <= t; i++) { if (g[i] > g1) g1 = g[i]; if (r[i] > r1) r1 = r[i]; if (f[i] > f1) f1 = f[i] }
		for (i = n - t + 1; i <= n; i++) { if (g[i] > g3) g3 = g[i]; if (r[i] > r3) r3 = r[i]; if (f[i] > f3) f3 = f[i] }
		bad = ""
		if (g3 > 1.2 * g1 + 50) bad = bad sprintf(" goroutines %d -> %d;", g1, g3)
		if (r3 > 1.2 * r1 + 16384) bad = bad sprintf(" RSS %d -> %d KiB;", r1, r3)
		if (f3 > 1.2 * f1 + 50) bad = bad sprintf(" fds %d -> %d;", f1, f3)
		printf "first third max: goroutines %d, RSS %d KiB, fds %d; last third max: goroutines %d, RSS %d KiB, fds %d%s%s\n",
			g1, r1, f1, g3, r3, f3, (bad == "" ? "" : "; GROWTH:"), bad
	}' "$tmp/samples")
log "plateau: $plateau"
case $plateau in *GROWTH* | *"too few"*) fail+=("no plateau: $plateau") ;; esac
if grep -q 'level=ERROR' "$tmp/sluice.log"; then
	fail+=("errors in the daemon's log: $(grep 'level=ERROR' "$tmp/sluice.log" | head -3)")
fi
if [ ${#fail[@]} -gt 0 ]; then
	printf 'FAIL: %s\n' "${fail[@]}"
	exit 1
fi
echo "PASS: soak $DURATION on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ): $plateau"
