#!/usr/bin/env bash
# anvil.sh — sluice's anvil door against Postfix's own anvil(8) and a C
# floor, side by side.
#
# The three servers get the same load from bench/anvilload (persistent
# UNIX-socket connections speaking the anvil protocol as smtpd does) at
# c = 1, 8 and 64 connections, interleaved; which server goes first rotates
# each round. The servers:
#   sluice   "sluice serve" with only its anvil door
#   postfix  Postfix's own anvil, in a private instance (bench/postfixanvil,
#            built on internal/testutil/postfixtest) whose master starts
#            anvil on the first connection
#   cfloor   bench/protofloor.c's anvil mode, built here with cc: one
#            thread on epoll, static replies, no counters (what answering
#            the protocol costs at the least)
# Each run's line carries the server's CPU time per request (user +
# system, /proc/PID/stat over the run's warm-up and measured period;
# Postfix: its anvil processes, and any that exited, through the master's
# reaped children's time) and its threads' context switches per request
# (/proc/PID/task/*/status; an anvil that exited during the run loses
# its). It prints every run, a table of medians over the rounds, a cost
# table (CPU time and context switches per request, median with the
# smallest and largest round's value), one
# "anvil cpu sluice/cfloor c=<c>: X.XX (<= 1.5: met|MISSED)" line per c
# (the ratio of the median CPU times per request), one
# "anvil ratio sluice/postfix c=<c>: X.XX" line per c (ratio of median
# requests per second), and ends with the c=64 ratio line.
#
# Usage (as root; Postfix's master refuses to run otherwise):
#   bench/anvil.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/anvil.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/anvil.sh
#   bench/anvil.sh -h              this text
# Environment: QUICK=1 (DURATION and ROUNDS are then ignored), DURATION
# (5s), ROUNDS (3). Needs go and cc (gcc).
#
# The load generator and the servers share this machine's CPUs; nothing is
# pinned. Absolute numbers therefore depend on the core count (anvilload with
# c=64 competes with the server for CPU), but the servers face the same
# competition, so the ratios are the figures to compare across machines.
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
require_root "Postfix's master daemon needs it"
command -v cc >/dev/null || die "cc is missing (apt-get install gcc): it builds the C floor"

run_length
CONCURRENCY=(1 8 64)
TARGETS=(sluice postfix cfloor)
WARMUP=0.5 # seconds: anvilload's default -warmup, unmeasured but served

tmp=$(mktemp -d /tmp/sluice-bench-anvil.XXXXXX)
sluice_pid=
floor_pid=
pfa_pid=
watch_pid=

cleanup() {
	if [[ -n $sluice_pid ]]; then
		stop_pid "$sluice_pid" 10
	fi
	if [[ -n $floor_pid ]]; then
		stop_pid "$floor_pid" 5
	fi
	exec 7>&- # closes the liveness pipe: postfixanvil and the watchdog see EOF
	if [[ -n $pfa_pid ]]; then
		stop_pid "$pfa_pid" 40
	fi
	if [[ -n $watch_pid ]]; then
		stop_pid "$watch_pid" 5
	fi
	# Should postfixanvil have died without stopping its instance, stop
	# that instance's master (and so its children) by its pid file.
	local pidfile=$tmp/postfix/queue/pid/master.pid mpid
	if [[ -f $pidfile ]]; then
		mpid=$(tr -d ' \n' <"$pidfile")
		if [[ -n $mpid ]] && [[ -r /proc/$mpid/cmdline ]] &&
			tr '\0' ' ' <"/proc/$mpid/cmdline" | grep -qF -- "$tmp/postfix/etc"; then
			echo "warning: stopping leftover Postfix master $mpid" >&2
			kill -TERM "$mpid"
			sleep 2
		fi
	fi
	rm -rf "$tmp"
}
on_exit cleanup

log "building sluice, anvilload, postfixanvil and protofloor in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/anvilload" ./bench/anvilload
go build -o "$tmp/postfixanvil" ./bench/postfixanvil
cc -O2 -Wall -o "$tmp/protofloor" bench/protofloor.c

# --- Postfix's own anvil, in a private instance ------------------------------
log "starting a private Postfix instance with its own anvil"
mkdir "$tmp/postfix"
# The liveness pipe and watchdog (lib.sh): if this script dies, even by
# SIGKILL, postfixanvil (which reads the pipe) stops its instance, and the
# watchdog stops sluice and postfixanvil and removes $tmp once both are
# gone.
start_watchdog "$tmp" 60
"$tmp/postfixanvil" -dir "$tmp/postfix" <"$tmp/alive.fifo" \
	>"$tmp/postfixanvil.out" 2>"$tmp/postfixanvil.err" 7>&- &
pfa_pid=$!
echo "pid $pfa_pid" >>"$tmp/daemons"
if ! line=$(wait_for_line "$tmp/postfixanvil.out" '^socket=' 60 "$pfa_pid"); then
	cat "$tmp/postfixanvil.err" >&2
	die "Postfix instance did not start"
fi
postfix_sock=${line#socket=}
[[ -S $postfix_sock ]] || die "Postfix anvil socket $postfix_sock missing"

# --- sluice's anvil --------------------------------------------------------------
log "starting sluice serve with an anvil door"
sluice_sock=$tmp/sluice-anvil.sock
mkdir -m 0700 "$tmp/sluice-state"
cat >"$tmp/sluice.toml" <<EOF
state_dir = "$tmp/sluice-state"

[anvil]
listen = ["unix:$sluice_sock"]
EOF
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 7>&- &
sluice_pid=$!
echo "pid $sluice_pid" >>"$tmp/daemons"
if ! wait_for_socket "$sluice_sock" 10 "$sluice_pid"; then
	tail -n 30 "$tmp/sluice.log" >&2
	die "sluice's anvil socket did not appear"
fi

# --- the C floor -----------------------------------------------------------------
log "starting the C floor (bench/protofloor.c, anvil mode)"
floor_sock=$tmp/floor-anvil.sock
"$tmp/protofloor" anvil "unix:$floor_sock" </dev/null >"$tmp/floor.log" 2>&1 7>&- &
floor_pid=$!
echo "pid $floor_pid" >>"$tmp/daemons"
if ! wait_for_socket "$floor_sock" 10 "$floor_pid"; then
	cat "$tmp/floor.log" >&2
	die "the C floor's socket did not appear"
fi

# server_pids TARGET — the processes whose CPU time and context switches
# count as TARGET's: Postfix's master (its reaped children's time only,
# see server_ticks) and its anvil children.
postfix_master=
server_pids() {
	case $1 in
	sluice) echo "$sluice_pid" ;;
	cfloor) echo "$floor_pid" ;;
	postfix)
		if [[ -z $postfix_master ]]; then
			postfix_master=$(tr -d ' \n' <"$tmp/postfix/queue/pid/master.pid")
		fi
		pgrep -P "$postfix_master" -x anvil || true
		;;
	esac
}

# server_ticks TARGET — TARGET's CPU time so far in clock ticks. For
# Postfix: its live anvil processes' own time plus the time of the
# master's reaped children (an anvil that exited, and whatever else the
# instance ran and reaped: the discard-only instance runs little else).
server_ticks() {
	local own reaped=0
	# shellcheck disable=SC2046 # one word per pid is intended
	own=$(proc_ticks $(server_pids "$1"))
	if [[ $1 == postfix ]]; then
		reaped=$(($(PROC_TICKS_CHILDREN=1 proc_ticks "$postfix_master") - $(proc_ticks "$postfix_master")))
	fi
	echo $((own + reaped))
}

hz=$(getconf CLK_TCK)
declare -A sock=([sluice]=$sluice_sock [postfix]=$postfix_sock [cfloor]=$floor_sock)
declare -A rps=() p50=() p99=() cpu=() cs=()

cpus=$(nproc)
echo "load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
log "postfix $(/usr/sbin/postconf -c "$tmp/postfix/etc" -h mail_version 2>/dev/null || echo '?'), $(go env GOVERSION), $cpus CPUs"
log "duration $DURATION per run, $ROUNDS round(s), c in ${CONCURRENCY[*]}"

for ((round = 1; round <= ROUNDS; round++)); do
	# Rotate the order: round 1 starts with sluice, round 2 with postfix, ...
	k=$(((round - 1) % ${#TARGETS[@]}))
	order=("${TARGETS[@]:k}" "${TARGETS[@]:0:k}")
	for c in "${CONCURRENCY[@]}"; do
		for t in "${order[@]}"; do
			t0=$(server_ticks "$t")
			# shellcheck disable=SC2046
			s0=$(proc_switches $(server_pids "$t"))
			if ! out=$("$tmp/anvilload" -socket "${sock[$t]}" -c "$c" -warmup "${WARMUP}s" \
				-duration "$DURATION" -label "$t" 2>"$tmp/anvilload.err" 7>&-); then
				echo "$out" >&2
				cat "$tmp/anvilload.err" >&2
				die "anvilload against $t at c=$c failed"
			fi
			t1=$(server_ticks "$t")
			# shellcheck disable=SC2046
			s1=$(proc_switches $(server_pids "$t"))
			# Requests served over the warm-up and the measured period,
			# assumed to run at the measured rate.
			n=$(awk -v r="$(field "$out" rps)" -v s="$(field "$out" secs)" -v w="$WARMUP" 'BEGIN { print r * (s + w) }')
			c_us=$(per_request $((t1 - t0)) "$n" 1 "$((1000000 / hz))")
			c_cs=$(per_request $((s1 - s0)) "$n" 2)
			echo "round $round: $out server_cpu_us=$c_us server_cs=$c_cs"
			rps[$t,$c]+=" $(field "$out" rps)"
			p50[$t,$c]+=" $(field "$out" p50_us)"
			p99[$t,$c]+=" $(field "$out" p99_us)"
			cpu[$t,$c]+=" $c_us"
			cs[$t,$c]+=" $c_cs"
		done
	done
done

# Both servers must still be up: a crash during the runs would otherwise
# only show as errors above.
kill -0 "$sluice_pid" 2>/dev/null || die "sluice exited during the benchmark"
kill -0 "$floor_pid" 2>/dev/null || die "the C floor exited during the benchmark"
echo "load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "medians over $ROUNDS round(s), $DURATION per run, $cpus CPUs shared by load generator and servers:"
printf '%-4s %-8s %12s %10s %10s\n' "c=" target rps p50_us p99_us
declare -A med=()
for c in "${CONCURRENCY[@]}"; do
	for t in "${TARGETS[@]}"; do
		# shellcheck disable=SC2086 # word splitting of the value lists is intended
		med[$t,$c]=$(median ${rps[$t,$c]})
		# shellcheck disable=SC2086
		printf '%-4s %-8s %12.1f %10.1f %10.1f\n' "$c" "$t" "${med[$t,$c]}" \
			"$(median ${p50[$t,$c]})" "$(median ${p99[$t,$c]})"
	done
done
echo
echo "cost per request, medians over the rounds (min-max over the rounds):"
echo "(server_cpu_us: CPU time the server used per request, user + system;"
echo "server_cs: its threads' context switches per request)"
printf '%-4s %-8s %24s %22s\n' "c=" target server_cpu_us server_cs
for c in "${CONCURRENCY[@]}"; do
	for t in "${TARGETS[@]}"; do
		# shellcheck disable=SC2086
		printf '%-4s %-8s %24s %22s\n' "$c" "$t" "$(median_range ${cpu[$t,$c]})" "$(PREC=2 median_range ${cs[$t,$c]})"
	done
done
for c in "${CONCURRENCY[@]}"; do
	# shellcheck disable=SC2086
	cpu_ratio_line "anvil cpu sluice/cfloor c=$c" "$(median ${cpu[sluice,$c]})" "$(median ${cpu[cfloor,$c]})"
done
echo
# The c=64 line comes last: CONCURRENCY is in increasing order.
for c in "${CONCURRENCY[@]}"; do
	awk -v s="${med[sluice,$c]}" -v p="${med[postfix,$c]}" -v c="$c" \
		'BEGIN { printf "anvil ratio sluice/postfix c=%s: %.2f\n", c, (p > 0 ? s / p : 0) }'
done
