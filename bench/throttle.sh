#!/usr/bin/env bash
# throttle.sh: sluice's throttle service under load. 64 concurrent senders
# ask for slots over 1,000 keys (limit 5 per second per key, so the keys'
# queues grow and the window check bites); prints grants per second, grant
# latency, and the largest number of grants any key got in any window,
# which must equal the limit. QUICK=1 runs 1 s instead of 5 s.
#
# No other program does this (the qmail article's wrapper is a Perl
# script with the races sluice removes), so there is no peer to compare.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

DURATION=${DURATION:-5s}
[[ ${QUICK:-0} == 1 ]] && DURATION=1s
tmp=$(mktemp -d /tmp/sluice-bench-throttle.XXXXXX)
sluice_pid=
cleanup() {
	local rc=$?
	[[ -n $sluice_pid ]] && stop_pid "$sluice_pid" 10
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "building sluice and throttleload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/throttleload" ./bench/throttleload
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
margin = "0s"
max_wait = "24h"
TOML
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 &
sluice_pid=$!
wait_for_socket "$tmp/state/throttle" 10 "$sluice_pid" || { tail "$tmp/sluice.log" >&2; die "sluice did not start"; }
log "$(go env GOVERSION), $(nproc) CPUs shared by senders and server, $DURATION"
"$tmp/throttleload" -socket "$tmp/state/throttle" -c 64 -keys 1000 -duration "$DURATION" -limit 5 -period 1s
