#!/usr/bin/env bash
# muxprof.sh — where a multiplexor's CPU goes under the relayok load of
# bench/mux.sh (bench/results/2026-11-26-mux-notebook.md, "What the rest of the gap is: goroutines,
# not Go"). For each target (sluice, mimedefang, floor: the multiplexors
# and the C floor of bench/mux.sh, with the same 8 fake workers and
# options), one after the other, it runs muxload with C clients for
# DURATION and, during it, `perf stat` and then `perf record -g` on the
# multiplexor process for PERF_SECS each. It prints per request: the
# multiplexor's CPU time, context switches and system calls (perf stat),
# and the perf samples grouped by the system call they fell in ("user"
# for user space, "preempted" for a switch on the way out of a system
# call), in microseconds per request. perf slows the target: compare the
# targets with each other, not with bench/mux.sh's figures.
#
# Usage (root, as bench/mux.sh: the multiplexors run as defang):
#   bench/muxprof.sh                    all three, C=64, PERF_SECS=4
#   C=8 PERF_SECS=3 bench/muxprof.sh sluice floor
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

require_root "the multiplexors run as defang, perf needs the privilege"
command -v perf >/dev/null || die "perf is missing (apt-get install linux-perf)"
command -v gcc >/dev/null || die "gcc is missing (apt-get install gcc): it builds the floor"
REFERENCE=$(reference_mux)
id defang >/dev/null 2>&1 || die "there is no user defang (apt-get install mimedefang)"
C=${C:-64}
PERF_SECS=${PERF_SECS:-4}
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(sluice mimedefang floor)
WORKERS=8

tmp=$(mktemp -d /tmp/sluice-muxprof.XXXXXX)
chmod 755 "$tmp"
pid=
cleanup() {
	[[ -z $pid ]] || stop_pid "$pid" 30
	rm -rf "$tmp"
}
on_exit cleanup

log "building sluice, muxload, the fake worker and the floor in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/muxload" ./bench/muxload
CGO_ENABLED=0 go build -o "$tmp/fakeworker" ./internal/pool/testdata/fakeworker
gcc -O2 -Wall -o "$tmp/muxfloor" bench/muxfloor.c
chmod 755 "$tmp"/*

# profile TARGET — one target's figures.
profile() {
	local t=$1 spool=$tmp/spool-$1
	mkdir "$spool"
	chown defang "$spool"
	local sock=$spool/mx.sock
	local args=(-D -z "$spool" -s "$sock" -f "$tmp/fakeworker" -m "$WORKERS" -x "$WORKERS" -w 1 -r 1000000 -q 128 -U defang)
	case $t in
	sluice) "$tmp/sluice" mux "${args[@]}" </dev/null >"$tmp/$t.log" 2>&1 & ;;
	mimedefang) "$REFERENCE" "${args[@]}" </dev/null >"$tmp/$t.log" 2>&1 & ;;
	floor)
		(cd "$spool" && exec setpriv --reuid=defang --regid="$(id -g defang)" --init-groups \
			"$tmp/muxfloor" "$sock" "$WORKERS" "$tmp/fakeworker" 5) </dev/null >"$tmp/$t.log" 2>&1 &
		;;
	*) die "unknown target $t (sluice, mimedefang or floor)" ;;
	esac
	pid=$!
	wait_for_socket "$sock" 10 "$pid" || { cat "$tmp/$t.log" >&2; die "$t did not start"; }
	sleep 1.5 # all workers up
	local duration=$((2 * PERF_SECS + 3))
	"$tmp/muxload" -socket "$sock" -cmd relayok -c "$C" -duration "${duration}s" -label "$t" >"$tmp/load.out" &
	local load=$!
	sleep 1
	perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "$pid" -- sleep "$PERF_SECS" 2>"$tmp/stat.csv"
	perf record -q -F 4999 -g -o "$tmp/perf.data" -p "$pid" -- sleep "$PERF_SECS" 2>/dev/null
	wait "$load"
	stop_pid "$pid" 30
	pid=
	local rps
	rps=$(field "$(cat "$tmp/load.out")" rps)
	echo "== $t: relayok c=$C, $rps req/s over the run (perf running for most of it)"
	# perf stat: per request, from the load's rate over PERF_SECS.
	awk -F, -v rps="$rps" -v secs="$PERF_SECS" '
		{ v[$3] = $1 }
		END {
			n = rps * secs
			printf "  perf stat per request: cpu %.1f us, context switches %.2f, system calls %.2f\n",
				v["task-clock"] * 1000 / n, v["context-switches"] / n, v["raw_syscalls:sys_enter"] / n
		}' "$tmp/stat.csv"
	# perf record: samples by system call, in us per request.
	perf script -i "$tmp/perf.data" -F ip,sym 2>/dev/null | awk -v rps="$rps" -v secs="$PERF_SECS" '
		/^$/ { if (n) { c[cls]++; tot++ } n = 0; cls = "user"; sc = ""; pre = 0; next }
		{
			n++
			if (n == 1 && $2 ~ /finish_task_switch/) pre = 1
			if (sc == "" && $2 ~ /^(__x64_sys_|ksys_|__sys_)/) sc = $2
			if ($2 ~ /entry_SYSCALL/) cls = pre ? "preempted" : (sc == "" ? "other system call" : sc)
			if ($2 ~ /asm_sysvec|asm_common_interrupt/) cls = "interrupt"
		}
		END {
			us = 1e6 / 4999 / (rps * secs)
			for (k in c) printf "  %-24s %6.2f us/request (%4.1f %%)\n", k, c[k] * us, 100 * c[k] / tot
		}' | sort -k2 -rn
}

for t in "${TARGETS[@]}"; do
	profile "$t"
done
