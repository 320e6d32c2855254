#!/usr/bin/env bash
# anvil.sh — sluice's anvil door against Postfix's own anvil(8), side by side.
#
# Both servers get the same load from bench/anvilload (persistent UNIX-socket
# connections speaking the anvil protocol as smtpd does) at c = 1, 8 and 64
# connections, interleaved A/B; which server goes first alternates each
# round. It prints every run, a table of medians over the rounds, one
# "anvil ratio sluice/postfix c=<c>: X.XX" line per c (ratio of median
# requests per second), and ends with the c=64 ratio line.
#
# Usage (as root; Postfix's master refuses to run otherwise):
#   bench/anvil.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/anvil.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/anvil.sh
#
# Postfix's anvil runs in a private instance (bench/postfixanvil, built on
# internal/testutil/postfixtest) whose master starts anvil on the first
# connection; sluice runs "sluice serve" with only its anvil door.
#
# The load generator and both servers share this machine's CPUs; nothing is
# pinned. Absolute numbers therefore depend on the core count (anvilload with
# c=64 competes with the server for CPU), but both servers face the same
# competition, so the ratio is the figure to compare across machines.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

require_root "Postfix's master daemon needs it"

run_length
CONCURRENCY=(1 8 64)
TARGETS=(sluice postfix)

tmp=$(mktemp -d /tmp/sluice-bench-anvil.XXXXXX)
sluice_pid=
pfa_pid=
watch_pid=

cleanup() {
	if [[ -n $sluice_pid ]]; then
		stop_pid "$sluice_pid" 10
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

log "building sluice, anvilload and postfixanvil in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/anvilload" ./bench/anvilload
go build -o "$tmp/postfixanvil" ./bench/postfixanvil

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

declare -A sock=([sluice]=$sluice_sock [postfix]=$postfix_sock)
declare -A rps=() p50=() p99=()

cpus=$(nproc)
log "postfix $(/usr/sbin/postconf -c "$tmp/postfix/etc" -h mail_version 2>/dev/null || echo '?'), $(go env GOVERSION), $cpus CPUs"
log "duration $DURATION per run, $ROUNDS round(s), c in ${CONCURRENCY[*]}"

for ((round = 1; round <= ROUNDS; round++)); do
	if ((round % 2)); then
		order=("${TARGETS[@]}")
	else
		order=("${TARGETS[1]}" "${TARGETS[0]}")
	fi
	for c in "${CONCURRENCY[@]}"; do
		for t in "${order[@]}"; do
			if ! out=$("$tmp/anvilload" -socket "${sock[$t]}" -c "$c" \
				-duration "$DURATION" -label "$t" 2>"$tmp/anvilload.err" 7>&-); then
				echo "$out" >&2
				cat "$tmp/anvilload.err" >&2
				die "anvilload against $t at c=$c failed"
			fi
			echo "round $round: $out"
			rps[$t,$c]+=" $(field "$out" rps)"
			p50[$t,$c]+=" $(field "$out" p50_us)"
			p99[$t,$c]+=" $(field "$out" p99_us)"
		done
	done
done

# Both servers must still be up: a crash during the runs would otherwise
# only show as errors above.
kill -0 "$sluice_pid" 2>/dev/null || die "sluice exited during the benchmark"

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
# The c=64 line comes last: CONCURRENCY is in increasing order.
for c in "${CONCURRENCY[@]}"; do
	awk -v s="${med[sluice,$c]}" -v p="${med[postfix,$c]}" -v c="$c" \
		'BEGIN { printf "anvil ratio sluice/postfix c=%s: %.2f\n", c, (p > 0 ? s / p : 0) }'
done
