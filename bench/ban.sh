#!/usr/bin/env bash
# ban.sh: the qmail article's scenario, side by side (issue 29). A relay on
# loopback bans the sender for T with a permanent 554 after more than X
# sends in any Y; 500 messages are queued at once and delivered by 10
# concurrent `sluice throttle -qmail-remote` wrappers around a qmail-remote
# stand-in that speaks SMTP to the relay (qmail is not packaged for
# Debian); qmail-send's retries of deferred messages are played on its
# schedule, scaled. Three runs, one sluice each:
#   none    today's wrapper: a budget far above the relay's, no ban handling
#   known   protection with the relay's limit known: limit = X/Y
# (every run with margin = "1s", as docs/throttle.md's qmail recipe).
#   adapt   the limit unknown: four times the relay's rate, adapt = true
#           (each ban halves it at most: a limit k times the relay's costs
#           about log2(k) bans to learn)
# Each prints what reached qmail (delivered, bounced, deferred), what the
# relay saw (bans, refused MAILs, duplicates, the most sends in any Y) and
# the time to empty the queue.
#
# Full size (default): X=100 per Y=10s, ban T=30s, retry unit 2s (qmail:
# 20s). QUICK=1: the CI test's scale (X=60 per 2s, T=3s, unit 0.7s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

if [[ ${QUICK:-} == 1 ]]; then
	X=60 Y=2s T=3s UNIT=700ms ADAPT_LIMIT=120/1s COOL=4s
else
	X=100 Y=10s T=30s UNIT=2s ADAPT_LIMIT=400/10s COOL=60s
fi
MESSAGES=${MESSAGES:-500}
tmp=$(mktemp -d /tmp/sluice-bench-ban.XXXXXX)
sluice_pid=
cleanup() {
	[[ -n $sluice_pid ]] && stop_pid "$sluice_pid" 10
	rm -rf "$tmp"
}
on_exit cleanup

log "building sluice, banload and the qmail-remote stand-in in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/banload" ./bench/banload
go build -o "$tmp/qmail-remote" ./internal/throttle/bantest/qmail-remote

policy() {
	case $1 in
	none) printf 'limit = "%s"\n' "$((X * 10))/$Y" ;;
	known) printf 'limit = "%s"\nban_signs = ["too many"]\nban_after = 5\ncool_off = "%s"\n' "$X/$Y" "$COOL" ;;
	adapt) printf 'limit = "%s"\nban_signs = ["too many"]\nban_after = 5\ncool_off = "%s"\nadapt = true\n' "$ADAPT_LIMIT" "$COOL" ;;
	esac
}

log "$(go env GOVERSION), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); relay: more than $X sends in any $Y bans for $T; $MESSAGES messages, 10 at once"
for run in none known adapt; do
	state="$tmp/state-$run"
	mkdir -m 0700 "$state"
	cat >"$tmp/$run.toml" <<TOML
state_dir = "$state"
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
shared = true
max_wait = "1h"
margin = "1s"
$(policy "$run")
TOML
	"$tmp/sluice" serve -c "$tmp/$run.toml" </dev/null >"$tmp/$run.log" 2>&1 &
	sluice_pid=$!
	wait_for_socket "$state/throttle" 10 "$sluice_pid" || { tail "$tmp/$run.log" >&2; die "sluice did not start"; }
	"$tmp/banload" -label "$run" -sluice "$tmp/sluice" -qmail-remote "$tmp/qmail-remote" -socket "$state/throttle" \
		-x "$X" -y "$Y" -t "$T" -retry-unit "$UNIT" -messages "$MESSAGES"
	grep -E 'msg="throttle: (relay ban|limit (lowered|raised))' "$tmp/$run.log" | sed -e 's/^time=[^ ]*T//' -e "s/^/  $run: /" | cut -c1-200 || true
	stop_pid "$sluice_pid" 10 || true
	sluice_pid=
done
