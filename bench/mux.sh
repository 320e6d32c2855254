#!/usr/bin/env bash
# mux.sh — sluice mux against the reference mimedefang-multiplexor and
# against a floor, side by side.
#
# Both multiplexors run 8 identical fast fake workers (the pool tests' fake
# worker, internal/pool/testdata/fakeworker: it answers relayok with
# "ok 1 ok 250 2.1.0 0" and scan with "ok" at once) with the same options:
#   -m 8 -x 8 -w 1   all 8 workers up before the runs start
#   -r 1000000       no recycling during the runs (the default 500 would
#                    measure fork/exec of workers, not the multiplexor)
#   -q 128           the largest queue, so that 64 clients wait for the
#                    8 workers instead of getting "No free workers"
# and the default listen backlog (-I: 5 for -x 8), which the floor uses too.
#
# The floor is the least a multiplexor can be (C, bench/muxfloor.c, built
# in the temp dir with gcc): one thread and epoll; it accepts, reads the
# request line, relays it over a pipe to an idle worker of the same 8 fake
# workers (queueing it while all are busy), relays the reply line back and
# closes; it answers status itself from the workers' states. It listens
# with the multiplexors' backlog. No recycling, limits, logging or
# statistics. What the floor cannot beat is the kernel's
# per-request connect, accept and close, and the workers.
#
# bench/muxload connects as the mimedefang milter does: a new UNIX-socket
# connection per request (blocking connect), one line, the reply read to
# EOF; each client has a Go runtime processor of its own, so that it is
# scheduled by the kernel as the milter's threads are (with 2 processors
# for 64 clients, muxload's own run queue made every target's p99 a coin
# toss: bench/results/2026-11-26-mux-notebook.md). Commands: relayok and scan (of a real work directory with INPUTMSG,
# HEADERS and COMMANDS; the fake worker does not read it) go to a worker,
# status is answered by the multiplexor itself. Each command runs at
# c = 1, 8 and 64 clients, against each multiplexor in turn (which goes
# first alternates each round). It prints every run, a table of medians over
# the rounds (req/s, p50 and p99 in microseconds, and the multiplexor
# process's own CPU time per request, workers not included), one
# "mux ratio sluice/mimedefang <cmd> c=<c>: X.XX" line per case (ratio of
# median req/s), the same against the floor (sluice/floor and
# mimedefang/floor), and ends with
#   mux ratio sluice/floor relayok c=64: X.XX
#
# Usage (as root the multiplexors run as user defang, since the reference
# refuses to run as root; as another user they run as that user):
#   bench/mux.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/mux.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/mux.sh
#   BACKLOG=128 bench/mux.sh     every target listens with backlog 128
#   COMMANDS=status CONCURRENCY=64 bench/mux.sh   one case only
#   BASELINE=/tmp/sluice-old bench/mux.sh
#       adds a fourth target, "baseline": another sluice binary (say, built
#       before a change) run the same way, so that a change is measured
#       before and after in one run; it gets its own ratio lines
#
# The load generator, both multiplexors and their workers share this
# machine's CPUs; nothing is pinned. At c=64 the 64 clients, the
# multiplexor and 8 workers compete for the cores, so absolute numbers
# depend on the core count and on whatever else runs; both multiplexors
# face the same competition, so the ratio is the figure to compare.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

REFERENCE=$(reference_mux)
command -v gcc >/dev/null || die "gcc is missing (apt-get install gcc): it builds the floor"

run_length
read -ra CONCURRENCY <<<"${CONCURRENCY:-1 8 64}"
read -ra COMMANDS <<<"${COMMANDS:-relayok scan status}"
TARGETS=(sluice mimedefang floor)
BASELINE=${BASELINE:-}
if [[ -n $BASELINE ]]; then
	[[ -x $BASELINE ]] || die "BASELINE=$BASELINE is not an executable"
	TARGETS+=(baseline)
fi
# The ratio lines go status, scan, relayok (relayok c=64 last).
RATIO_COMMANDS=()
for cmd in status scan relayok; do
	[[ " ${COMMANDS[*]} " == *" $cmd "* ]] && RATIO_COMMANDS+=("$cmd")
done
WORKERS=8
# The listen backlog: BACKLOG=n passes -I n to both multiplexors; the
# default is theirs (a quarter of -x, at least 5). The floor listens with
# the same: the backlog decides how clients wait (a connect beyond it
# blocks in the kernel until an accept makes room), and a floor with 128
# against sluice with 5 measured the backlog more than the multiplexor
# (bench/results/2026-11-26-mux-notebook.md).
backlog_arg=()
if [[ -n ${BACKLOG:-} ]]; then
	[[ $BACKLOG =~ ^[1-9][0-9]*$ ]] || die "BACKLOG=$BACKLOG is not a positive number"
	backlog_arg=(-I "$BACKLOG")
else
	BACKLOG=$((WORKERS / 4 > 5 ? WORKERS / 4 : 5))
fi

# Run the multiplexors as defang when root (the reference insists on -U).
run_user=$(id -un)
uarg=()
as_user=() # runs the floor as run_user
if [[ $(id -u) -eq 0 ]]; then
	id defang >/dev/null 2>&1 || die "running as root and there is no user defang (apt-get install mimedefang)"
	run_user=defang
	uarg=(-U defang)
	as_user=(setpriv --reuid=defang --regid="$(id -g defang)" --init-groups)
fi

# A short path: the sockets live below it (sun_path < 108 bytes).
tmp=$(mktemp -d /tmp/sluice-bench-mux.XXXXXX)
chmod 755 "$tmp"
declare -A pid=()
watch_pid=

cleanup() {
	local t
	for t in "${TARGETS[@]}"; do
		if [[ -n ${pid[$t]:-} ]]; then
			stop_pid "${pid[$t]}" 30
		fi
	done
	exec 7>&- # closes the liveness pipe: the watchdog sees EOF
	if [[ -n $watch_pid ]]; then
		stop_pid "$watch_pid" 5
	fi
	rm -rf "$tmp"
}
on_exit cleanup

# The watchdog (lib.sh): should this script die without its cleanup
# (SIGKILL), it stops the multiplexors listed in $tmp/daemons and removes
# $tmp.
start_watchdog "$tmp" 5

log "building sluice, muxload and the fake worker in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
if [[ -n $BASELINE ]]; then
	cp "$BASELINE" "$tmp/baseline"
fi
go build -o "$tmp/muxload" ./bench/muxload
CGO_ENABLED=0 go build -o "$tmp/fakeworker" ./internal/pool/testdata/fakeworker
gcc -O2 -Wall -o "$tmp/muxfloor" bench/muxfloor.c
chmod 755 "$tmp/sluice" "$tmp/muxload" "$tmp/fakeworker" "$tmp/muxfloor"
[[ -z $BASELINE ]] || chmod 755 "$tmp/baseline"

# A scan work directory as the milter makes it (mimedefang-protocol(7)).
work=$tmp/work/mdefang-BENCH000001
mkdir -p "$work"
printf 'From: <alice@example.com>\nTo: <bob@example.net>\nSubject: bench\n\nHello.\n' >"$work/INPUTMSG"
printf 'From: <alice@example.com>\nTo: <bob@example.net>\nSubject: bench\n' >"$work/HEADERS"
printf 'S<alice@example.com>\nR<bob@example.net> ? ? ?\nUbench\nQBENCH000001\nI127.0.0.1\nF\n' >"$work/COMMANDS"
chown -R "$run_user" "$tmp/work"

declare -A sock=()
start_mux() {
	local t=$1 spool=$tmp/spool-$1
	mkdir "$spool"
	chown "$run_user" "$spool"
	sock[$t]=$spool/mx.sock
	local args=(-D -z "$spool" -s "${sock[$t]}" -f "$tmp/fakeworker" -m "$WORKERS" -x "$WORKERS" -w 1 -r 1000000 -q 128 "${backlog_arg[@]}" "${uarg[@]}")
	if [[ $t == sluice || $t == baseline ]]; then
		"$tmp/$t" mux "${args[@]}" </dev/null >"$tmp/$t.log" 2>&1 7>&- &
	elif [[ $t == floor ]]; then
		# As the same user as the multiplexors, workers included.
		(cd "$spool" && exec "${as_user[@]}" "$tmp/muxfloor" "${sock[$t]}" "$WORKERS" "$tmp/fakeworker" "$BACKLOG") \
			</dev/null >"$tmp/$t.log" 2>&1 7>&- &
	else
		"$REFERENCE" "${args[@]}" </dev/null >"$tmp/$t.log" 2>&1 7>&- &
	fi
	pid[$t]=$!
	echo "pid ${pid[$t]}" >>"$tmp/daemons"
	if ! wait_for_socket "${sock[$t]}" 10 "${pid[$t]}"; then
		cat "$tmp/$t.log" >&2
		die "$t did not create its socket"
	fi
}

# wait_workers TARGET — wait until every worker slot is idle.
wait_workers() {
	local t=$1 i status
	for ((i = 0; i < 300; i++)); do
		status=$("$tmp/muxload" -socket "${sock[$t]}" -once status 7>&-) || status=
		if [[ $status =~ ^I{$WORKERS}\  ]]; then
			return 0
		fi
		sleep 0.1
	done
	die "$t: workers not all idle after 30 s: status '$status'"
}

for t in "${TARGETS[@]}"; do
	log "starting $t with $WORKERS fake workers"
	start_mux "$t"
done
for t in "${TARGETS[@]}"; do
	wait_workers "$t"
done

cpus=$(nproc)
log "mimedefang-multiplexor $("$REFERENCE" -v 2>&1 | awk '{ print $NF }'), $("$tmp/sluice" version), $(go env GOVERSION), $cpus CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
log "duration $DURATION per run, $ROUNDS round(s), commands ${COMMANDS[*]}, c in ${CONCURRENCY[*]}, listen backlog $BACKLOG"

# cpu_ticks PID — user plus system CPU time of PID so far, in clock ticks.
cpu_ticks() {
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
clk_tck=$(getconf CLK_TCK)

declare -A rps=() p50=() p99=() cpu=()
for ((round = 1; round <= ROUNDS; round++)); do
	order=()
	for ((k = 0; k < ${#TARGETS[@]}; k++)); do
		order+=("${TARGETS[(k + round - 1) % ${#TARGETS[@]}]}")
	done
	for cmd in "${COMMANDS[@]}"; do
		for c in "${CONCURRENCY[@]}"; do
			for t in "${order[@]}"; do
				ticks=$(cpu_ticks "${pid[$t]}")
				if ! out=$("$tmp/muxload" -socket "${sock[$t]}" -cmd "$cmd" -scandir "$work" -c "$c" \
					-duration "$DURATION" -label "$t" 2>"$tmp/muxload.err" 7>&-); then
					echo "$out" >&2
					cat "$tmp/muxload.err" >&2
					die "muxload $cmd against $t at c=$c failed"
				fi
				ticks=$(($(cpu_ticks "${pid[$t]}") - ticks))
				total=$(field "$out" total)
				cpu_us=$(awk -v t="$ticks" -v hz="$clk_tck" -v n="$total" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')
				echo "round $round: $out cpu_us_per_req=$cpu_us"
				cpu[$t,$cmd,$c]+=" $cpu_us"
				rps[$t,$cmd,$c]+=" $(field "$out" rps)"
				p50[$t,$cmd,$c]+=" $(field "$out" p50_us)"
				p99[$t,$cmd,$c]+=" $(field "$out" p99_us)"
			done
		done
	done
done

# Both must still be up, with all their workers.
for t in "${TARGETS[@]}"; do
	kill -0 "${pid[$t]}" 2>/dev/null || die "$t exited during the benchmark"
done

echo
echo "medians over $ROUNDS round(s), $DURATION per run, $cpus CPUs shared by load generator, multiplexors and workers:"
printf '%-8s %-4s %-11s %10s %10s %10s %12s\n' cmd "c=" target req/s p50_us p99_us cpu_us/req
declare -A med=() med99=()
for cmd in "${COMMANDS[@]}"; do
	for c in "${CONCURRENCY[@]}"; do
		for t in "${TARGETS[@]}"; do
			# shellcheck disable=SC2086 # word splitting of the value lists is intended
			med[$t,$cmd,$c]=$(median ${rps[$t,$cmd,$c]})
			# shellcheck disable=SC2086
			med99[$t,$cmd,$c]=$(median ${p99[$t,$cmd,$c]})
			# shellcheck disable=SC2086
			printf '%-8s %-4s %-11s %10.1f %10.1f %10.1f %12.1f\n' "$cmd" "$c" "$t" "${med[$t,$cmd,$c]}" \
				"$(median ${p50[$t,$cmd,$c]})" "${med99[$t,$cmd,$c]}" "$(median ${cpu[$t,$cmd,$c]})"
		done
	done
done
echo
# ratio_lines WHAT A B — one "mux WHAT A/B <cmd> c=<c>: X.XX" line per case,
# the ratio of A's and B's medians of WHAT ("ratio": req/s, "p99 ratio":
# p99), relayok c=64 last.
ratio_lines() {
	local what=$1 a=$2 b=$3 cmd c x y
	for cmd in "${RATIO_COMMANDS[@]}"; do
		for c in "${CONCURRENCY[@]}"; do
			if [[ $what == ratio ]]; then
				x=${med[$a,$cmd,$c]} y=${med[$b,$cmd,$c]}
			else
				x=${med99[$a,$cmd,$c]} y=${med99[$b,$cmd,$c]}
			fi
			awk -v s="$x" -v m="$y" -v w="$what" -v a="$a" -v b="$b" -v cmd="$cmd" -v c="$c" \
				'BEGIN { printf "mux %s %s/%s %s c=%s: %.2f\n", w, a, b, cmd, c, (m > 0 ? s / m : 0) }'
		done
	done
}
ratio_lines "p99 ratio" sluice mimedefang
ratio_lines "p99 ratio" sluice floor
if [[ -n $BASELINE ]]; then
	ratio_lines "p99 ratio" baseline mimedefang
	ratio_lines "p99 ratio" sluice baseline
	ratio_lines ratio sluice baseline
fi
ratio_lines ratio sluice mimedefang
ratio_lines ratio mimedefang floor
# The sluice/floor relayok c=64 line comes last.
ratio_lines ratio sluice floor
