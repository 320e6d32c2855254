#!/usr/bin/env bash
# muxembed.sh — what mimedefang-multiplexor's -E (embedded Perl) buys, with
# Debian's multiplexor, the real /usr/bin/mimedefang.pl and the installed
# filter (/etc/mail/mimedefang-filter), with and without -E, and the same
# for `sluice mux`, in one run.
#
# Without -E each worker is `perl mimedefang.pl -server`: a fresh perl that
# compiles mimedefang.pl, its modules and the filter. With -E the
# multiplexor compiles them once in an embedded interpreter and forks each
# worker from it, so a worker starts with the code compiled and shares its
# pages with the multiplexor until it writes them. sluice mux -E does the
# same from a separate perl process (shown as "sluice mux -E: ..." in ps,
# not counted as a worker here).
#
# Two figures per mode:
#   start   the milter's view of a fresh worker: -m 1 -x 4 -r 1 recycles the
#           worker after every request, so each `ping` is served by a worker
#           started for it; the median and p90 latency of ROUNDS sequential
#           pings (worker start, filter_initialize, the ping) in ms.
#   memory  -m WORKERS -x WORKERS, all started, each having answered a ping
#           (WORKERS clients at once, each holding its worker with `sleep`...
#           mimedefang.pl has no sleep: the pings are sent until every
#           worker has served one); per worker, from /proc/PID/smaps_rollup,
#           Rss, Pss (Rss with each shared page divided among its sharers)
#           and Private (Private_Clean + Private_Dirty), in KiB, the median
#           over the workers; and the multiplexor's own Rss.
#
# Usage (root: the multiplexor refuses to run as root, so it runs with
# -U defang, as Debian runs it):
#   bench/muxembed.sh                ROUNDS=40 WORKERS=4
#   ROUNDS=100 WORKERS=8 bench/muxembed.sh
#   SLUICE=/tmp/sluice bench/muxembed.sh   that binary (default: built here)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh

ROUNDS=${ROUNDS:-40}
WORKERS=${WORKERS:-4}
require_root "the multiplexor runs its workers as defang"
id defang >/dev/null 2>&1 || die "no user defang (apt-get install mimedefang)"
[[ -x /usr/bin/mimedefang.pl ]] || die "no /usr/bin/mimedefang.pl (apt-get install mimedefang)"
ref=$(reference_mux)
command -v python3 >/dev/null || die "python3 is needed for the client"

tmp=$(mktemp -d /tmp/muxembed.XXXXXX)
chmod 0755 "$tmp"
if [[ -z ${SLUICE:-} ]]; then
	go build -o "$tmp/sluice" ./cmd/sluice
	SLUICE=$tmp/sluice
fi
mux_pid=
cleanup() {
	[[ -n $mux_pid ]] && stop_pid "$mux_pid" 15 >/dev/null 2>&1
	[[ -n ${KEEP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT

# client SOCK COUNT — COUNT sequential pings on SOCK; prints each latency
# in ms, one a line.
client() {
	python3 - "$1" "$2" <<'EOF'
import socket, sys, time
sock, n = sys.argv[1], int(sys.argv[2])
for _ in range(n):
    t = time.monotonic()
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"ping\n")
    b = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        b += d
    s.close()
    if not b.startswith(b"PONG"):
        sys.exit("reply %r, want PONG" % b)
    print("%.2f" % ((time.monotonic() - t) * 1000))
EOF
}

# start_mux TARGET MODE ARGS... — the reference or sluice with a fresh
# spool, in the foreground (-D), as defang; sets mux_pid and sock.
start_mux() {
	local target=$1 mode=$2
	shift 2
	local spool=$tmp/spool-$mode-$RANDOM
	install -d -o defang -g defang -m 0750 "$spool"
	sock=$spool/mx.sock
	local eflag=()
	[[ $mode == embedded ]] && eflag=(-E)
	local bin=("$ref")
	[[ $target == sluice ]] && bin=("$SLUICE" mux)
	"${bin[@]}" -D -U defang -z "$spool" -s "$sock" -f /usr/bin/mimedefang.pl "${eflag[@]}" "$@" \
		>"$tmp/mux-$target-$mode.log" 2>&1 &
	mux_pid=$!
	wait_for_socket "$sock" 30 "$mux_pid"
}

kib() { awk -v k="$2" '$1 == k ":" { print $2 }' "/proc/$1/smaps_rollup"; }

printf 'mux embed: %s, /usr/bin/mimedefang.pl, /etc/mail/mimedefang-filter; %s, ROUNDS=%s WORKERS=%s\n' \
	"$ref" "$(date -u +%Y-%m-%dT%H:%MZ)" "$ROUNDS" "$WORKERS"
for target in mimedefang sluice; do
for mode in exec embedded; do
	start_mux "$target" "$mode" -m 1 -x 4 -r 1 -w 60
	client "$sock" 2 >/dev/null # the first activation and a recycle
	mapfile -t ms < <(client "$sock" "$ROUNDS")
	stop_pid "$mux_pid" 15 >/dev/null
	mux_pid=
	p50=$(median "${ms[@]}")
	p90=$(printf '%s\n' "${ms[@]}" | sort -g | awk -v n="${#ms[@]}" 'NR == int(n * 0.9 + 0.5) { print }')
	printf 'mux embed %-10s %-8s start: ping on a fresh worker p50 %s ms p90 %s ms (%d rounds)\n' "$target" "$mode" "$p50" "$p90" "${#ms[@]}"

	start_mux "$target" "$mode" -m "$WORKERS" -x "$WORKERS" -w 1 -r 1000000
	for ((i = 0; i < 100; i++)); do
		pids=()
		for pid in $(pgrep -P "$mux_pid" || true); do
			grep -q '^sluice mux -E' "/proc/$pid/cmdline" 2>/dev/null || pids+=("$pid")
		done
		((${#pids[@]} >= WORKERS)) && break
		sleep 0.2
	done
	((${#pids[@]} >= WORKERS)) || die "$target $mode: $WORKERS workers did not start"
	client "$sock" $((WORKERS * 4)) >/dev/null
	sleep 1
	rss=() pss=() priv=()
	for pid in "${pids[@]}"; do
		rss+=("$(kib "$pid" Rss)")
		pss+=("$(kib "$pid" Pss)")
		priv+=($(($(kib "$pid" Private_Clean) + $(kib "$pid" Private_Dirty))))
	done
	extra=$(kib "$mux_pid" Rss)
	for pid in $(pgrep -P "$mux_pid" || true); do # the zygote
		grep -q '^sluice mux -E' "/proc/$pid/cmdline" 2>/dev/null && extra="$extra (its perl: Rss $(kib "$pid" Rss) Pss $(kib "$pid" Pss))"
	done
	printf 'mux embed %-10s %-8s memory per worker (KiB, median of %d): Rss %s Pss %s Private %s; multiplexor Rss %s\n' \
		"$target" "$mode" "${#pids[@]}" "$(median "${rss[@]}")" "$(median "${pss[@]}")" "$(median "${priv[@]}")" "$extra"
	stop_pid "$mux_pid" 15 >/dev/null
	mux_pid=
done
done
