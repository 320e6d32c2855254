#!/usr/bin/env bash
# throttle.sh: sluice's throttle service under load, 64 concurrent senders
# over 1,000 keys, limit 5 per second per key (the default margin, 250 ms),
# beside a C floor of the protocol. Two kinds of run:
#   wait=true   once, sluice only: each sender sleeps until its slot, then
#               sends the key to a recording relay inside throttleload,
#               which stamps it with its own clock; max_in_window is the
#               largest number of one key's sends the relay saw in any
#               second, which must equal the limit (the keys' queues grow,
#               so the check bites). Grants per second are then bounded by
#               the policy (1,000 keys x 5 per 1.25 s = 4,000/s at most).
#   wait=false  the decision path alone, ROUNDS rounds of sluice and the
#               C floor (which goes first alternates): senders say DONE at
#               once and send nothing; grants per second and grant latency,
#               no window. Each round's sluice run has keys of its own
#               (prefix decided<round>), so no round inherits another's
#               booked slots.
# The C floor (cfloor) is bench/protofloor.c's throttle mode, built here
# with cc: one thread on epoll that answers every ACQUIRE with "OK <now>"
# and reads the rest until the client closes; no keys, no queue, no limit.
# It cannot keep a window, so it gets the wait=false runs only.
#
# Every run's line carries the server's CPU time per grant (user + system,
# /proc/PID/stat, server_cpu_us) and its threads' context switches per
# grant (/proc/PID/task/*/status, server_cs). Then a table of medians over
# the rounds with the smallest and largest round's value, and the line
#   throttle cpu sluice/cfloor c=64: X.XX
# (the ratio of the median CPU times per grant; the issue sets no bound
# for it, so no verdict).
#
# Usage:
#   bench/throttle.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/throttle.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/throttle.sh
#   bench/throttle.sh -h              this text
# Environment: QUICK=1 (DURATION and ROUNDS are then ignored), DURATION
# (5s), ROUNDS (3). Needs go and cc (gcc); root is not needed (the servers
# run as the caller, on sockets in a private directory).
#
# No other program does this (the qmail article's wrapper is a Perl
# script with the races sluice removes), so there is no peer to compare:
# only the floor. Senders and servers share this machine's CPUs; nothing
# is pinned, so compare the ratio, not the absolute numbers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

case ${1:-} in
-h | -help | --help)
	sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
esac
command -v cc >/dev/null || die "cc is missing (apt-get install gcc): it builds the C floor"

run_length 5s 3
TARGETS=(sluice cfloor)
C=64
KEYS=1000
tmp=$(mktemp -d /tmp/sluice-bench-throttle.XXXXXX)
sluice_pid=
floor_pid=
watch_pid=
cleanup() {
	[[ -n $sluice_pid ]] && stop_pid "$sluice_pid" 10
	[[ -n $floor_pid ]] && stop_pid "$floor_pid" 5
	exec 7>&- # closes the liveness pipe: the watchdog finds nothing left
	[[ -n $watch_pid ]] && stop_pid "$watch_pid" 5
	rm -rf "$tmp"
}
on_exit cleanup

log "building sluice, throttleload and protofloor in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/throttleload" ./bench/throttleload
cc -O2 -Wall -o "$tmp/protofloor" bench/protofloor.c
# The watchdog (lib.sh): if this script dies, even by SIGKILL, it stops
# the servers and removes $tmp.
start_watchdog "$tmp" 15
mkdir -m 0700 "$tmp/state"
cat >"$tmp/sluice.toml" <<TOML
state_dir = "$tmp/state"
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relays"
match = ["*"]
limit = "5/1s"
max_wait = "24h"
TOML
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 7>&- &
sluice_pid=$!
echo "pid $sluice_pid" >>"$tmp/daemons"
wait_for_socket "$tmp/state/throttle" 10 "$sluice_pid" || { tail "$tmp/sluice.log" >&2; die "sluice did not start"; }
"$tmp/protofloor" throttle "unix:$tmp/floor.sock" </dev/null >"$tmp/floor.log" 2>&1 7>&- &
floor_pid=$!
echo "pid $floor_pid" >>"$tmp/daemons"
wait_for_socket "$tmp/floor.sock" 10 "$floor_pid" || { cat "$tmp/floor.log" >&2; die "the C floor did not start"; }

declare -A sock=([sluice]=$tmp/state/throttle [cfloor]=$tmp/floor.sock)
declare -A pid=([sluice]=$sluice_pid [cfloor]=$floor_pid)
declare -A gps=() p50=() p99=() cpu=() cs=()
hz=$(getconf CLK_TCK)

# measure TARGET ARGS... — one throttleload run against TARGET, printed
# with the server's CPU time and context switches per grant; sets out,
# c_us and c_cs. A failed run (errors, or a window over the limit) ends
# the script.
measure() {
	local t=$1 t0 s0 t1 s1 grants
	shift
	t0=$(proc_ticks "${pid[$t]}")
	s0=$(proc_switches "${pid[$t]}")
	if ! out=$("$tmp/throttleload" -socket "${sock[$t]}" -c "$C" -keys "$KEYS" -duration "$DURATION" "$@" 7>&-); then
		echo "$out" >&2
		die "throttleload against $t failed"
	fi
	t1=$(proc_ticks "${pid[$t]}")
	s1=$(proc_switches "${pid[$t]}")
	grants=$(field "$out" grants)
	c_us=$(per_request $((t1 - t0)) "$grants" 1 "$((1000000 / hz))")
	c_cs=$(per_request $((s1 - s0)) "$grants" 2)
	echo "target=$t $out server_cpu_us=$c_us server_cs=$c_cs"
}

echo "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
log "$(go env GOVERSION), $(nproc) CPUs shared by senders and servers, $DURATION per run, $ROUNDS round(s)"
measure sluice -wait -prefix waited -limit 5 -period 1s
for ((round = 1; round <= ROUNDS; round++)); do
	k=$(((round - 1) % ${#TARGETS[@]}))
	for t in "${TARGETS[@]:k}" "${TARGETS[@]:0:k}"; do
		measure "$t" -wait=false -prefix "decided$round"
		gps[$t]+=" $(field "$out" grants_per_s)"
		p50[$t]+=" $(field "$out" p50_us)"
		p99[$t]+=" $(field "$out" p99_us)"
		cpu[$t]+=" $c_us"
		cs[$t]+=" $c_cs"
	done
done
kill -0 "$sluice_pid" 2>/dev/null || die "sluice exited during the benchmark"
kill -0 "$floor_pid" 2>/dev/null || die "the C floor exited during the benchmark"
echo "load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "wait=false, medians over $ROUNDS round(s) (min-max over the rounds), $DURATION per run, c=$C:"
echo "(server_cpu_us: CPU time the server used per grant, user + system;"
echo "server_cs: its threads' context switches per grant)"
printf '%-8s %26s %8s %8s %22s %20s\n' target grants_per_s p50_us p99_us server_cpu_us server_cs
for t in "${TARGETS[@]}"; do
	# shellcheck disable=SC2086 # word splitting of the value lists is intended
	printf '%-8s %26s %8s %8s %22s %20s\n' "$t" "$(median_range ${gps[$t]})" "$(median ${p50[$t]})" \
		"$(median ${p99[$t]})" "$(median_range ${cpu[$t]})" "$(PREC=2 median_range ${cs[$t]})"
done
# shellcheck disable=SC2086
cpu_ratio_line "throttle cpu sluice/cfloor c=$C" "$(median ${cpu[sluice]})" "$(median ${cpu[cfloor]})" -
