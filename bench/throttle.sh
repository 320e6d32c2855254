#!/usr/bin/env bash
# throttle.sh: sluice's throttle service under load, 64 concurrent senders
# over 1,000 keys, limit 5 per second per key (the default margin, 250 ms),
# two runs:
#   wait=true   each sender sleeps until its slot, then sends the key to a
#               recording relay inside throttleload, which stamps it with
#               its own clock; max_in_window is the largest number of one
#               key's sends the relay saw in any second, which must equal
#               the limit (the keys' queues grow, so the check bites).
#               Grants per second are then bounded by the policy (1,000
#               keys x 5 per 1.25 s = 4,000/s at most).
#   wait=false  the decision path alone: senders say DONE at once and send
#               nothing; grants per second and grant latency, no window.
# QUICK=1 runs each 1 s instead of 5 s.
#
# No other program does this (the qmail article's wrapper is a Perl
# script with the races sluice removes), so there is no peer to compare.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

run_length 5s # DURATION (ROUNDS is not used here)
tmp=$(mktemp -d /tmp/sluice-bench-throttle.XXXXXX)
sluice_pid=
cleanup() {
	[[ -n $sluice_pid ]] && stop_pid "$sluice_pid" 10
	rm -rf "$tmp"
}
on_exit cleanup

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
max_wait = "24h"
TOML
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 &
sluice_pid=$!
wait_for_socket "$tmp/state/throttle" 10 "$sluice_pid" || { tail "$tmp/sluice.log" >&2; die "sluice did not start"; }
log "$(go env GOVERSION), $(nproc) CPUs shared by senders and server, $DURATION"
"$tmp/throttleload" -socket "$tmp/state/throttle" -c 64 -keys 1000 -duration "$DURATION" -wait -prefix waited -limit 5 -period 1s
"$tmp/throttleload" -socket "$tmp/state/throttle" -c 64 -keys 1000 -duration "$DURATION" -wait=false -prefix decided
