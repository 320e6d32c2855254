#!/usr/bin/env bash
# flood.sh — a real Postfix 3.7 under a flood of idle bots: what the known
# peers and the legitimate single senders still get through, with Postfix
# alone, with a static XLA cap in sluice's milter, and with sluice's
# reservation recipe through the milter and through anvil; then where a
# refusal costs least (smtpd's anvil check, the milter's CONNECT, or
# postscreen in front).
#
# The load is bench/floodload (Go; "go doc ./bench/floodload"). Every client
# binds its own loopback address (Linux routes all of 127.0.0.0/8 to lo):
#   known peers    KNOWN (4) from 127.0.1.0/24, each sending one whole
#                  message per SMTP session in a loop
#   bots           BOTS (200), five to a /24 from 127.20.0.0 on (40 /24s):
#                  connect, EHLO, hold the session idle; reconnect BOT_RETRY
#                  (1 s) to 1.5 times that after a refusal or a drop
#   single senders one every 250 ms during the flood, each from a /24 of its
#                  own (127.60.0.0 on), one message, SINGLE_TIMEOUT to get it
#                  accepted
# A round is, per row: the known peers alone for 1 s (unmeasured) and BASE,
# the bots alone for WARMUP, then all three for DURATION (the messages under
# way then get their timeout, TIMEOUT for a known peer's, SINGLE_TIMEOUT
# for a single's).
#
# Rows (one private Postfix instance each: default_process_limit = PROCS,
# 50 smtpd processes; everything delivered to discard(8);
# smtpd_peername_lookup = no, as the loopback clients have no reverse DNS
# and this machine's resolver took smtpd from about 950 sessions a second
# to 20; smtpd_timeout = IDLE_TIMEOUT, 10 s: what Postfix's stress mode
# sets, which Postfix alone reaches under the flood and the other rows,
# kept below the process limit, do not; so in every row an idle bot's
# session ends within a round, as it does on a real MX over the minutes
# of a flood; IDLE_TIMEOUT=300s is Postfix's default without stress):
#   postfix-alone    Postfix as installed (its own anvil, default limits)
#   xla-static       sluice's milter: class "known" (127.0.1.0/24) uncapped,
#                    catch-all "*" refuse = 30
#   reserve-milter   sluice's milter with [mta] sessions = PROCS and the known
#                    class's reserve = RESERVE (10), catch-all uncapped
#   reserve-anvil    the same configuration, sluice as Postfix's anvil
#                    (class caps at smtpd's anvil check), no milter
#   escalate-milter  reserve-milter with [mta.escalate]: an address refused
#                    10 times in a minute is dropped by the kernel for
#                    ESCALATE_FOR (60s: every escalation of a round ends
#                    before that row's next round), through its own
#                    `sluice escalate-helper` (its own nftables table, the
#                    row's port only)
#   escalate-anvil   reserve-anvil with the same escalation
# A sluice whose "sluice check" rejects the reserve configuration (before
# [mta] sessions and [[class]] reserve exist) has its two rows skipped,
# with the reason printed in the results.
#
# Per row, medians over the rounds with the spread (min-max): the known
# peers' goodput under the flood over their goodput without it (messages
# per second), their p99 latency (dial to the 250 after the dot) and
# failures under the flood, the single senders' success rate, and the
# bots' sessions held (median of 100 ms samples), and the CPU time the
# row's Postfix instance and sluice spent per known peer's message accepted
# in the calm and in the flood (what the flood adds to each message: the
# rate on 2 CPUs shared with the load varies by 20% from round to round,
# this much less). A message under way at the end of the flood counts in
# the p99 and the failures (it is late or fails), not in the goodput; a
# failed message counts in the p99 at its timeout.
#
# The cost of a refusal (MODE=cost, or after the rows): a class is filled
# with held sessions, then 8 clients from its networks reconnect as fast as
# the MTA answers for COST_DURATION; the CPU time of the whole Postfix
# instance (every process of master's session, reaped children included)
# and of sluice, per refused reconnect:
#   accept      (reference) Postfix alone: the reconnect is served (EHLO 250)
#   anvil       sluice as anvil, catch-all refuse = 30, 30 held: smtpd's 421
#   milter      xla-static's instance, 30 held: the milter's CONNECT refuses
#   postscreen  postscreen in front, a static cidr postscreen_access_list
#               rejecting 127.20.0.0/16, postscreen_denylist_action = drop
#   postscreen-map  the same, the access list a socketmap (floodload
#               socketmap: sluice's socket map server, internal/socketmap,
#               answering "OK reject" for 127.20.0.0/16; its CPU is in the
#               sluice column): the stand-in for the class caps answered to
#               postscreen by sluice, which has no such map yet
# and the line "cheapest refusal: ...".
#
# Usage (as root: Postfix's master needs it):
#   bench/flood.sh                  3 rounds, 10 s base, 30 s warm-up, 40 s flood
#   QUICK=1 bench/flood.sh          1 round, 3 s base, 3 s warm-up, 8 s flood,
#                                   10 s timeouts, 3 s cost runs
#   MODE=flood bench/flood.sh       the rows only (MODE=cost: the costs only)
#   ROUNDS=5 DURATION=60s BOTS=400 bench/flood.sh
# Environment: QUICK, MODE (all), ROUNDS (3), BASE (10s), WARMUP (30s: the flood is
# measured in its steady state, the escalation's included; runs before
# 2026-12-02 09:00 used 5s),
# DURATION (40s), TIMEOUT (30s), SINGLE_TIMEOUT (30s), BOT_RETRY (1s),
# IDLE_TIMEOUT (10s), ROWS (all six: a subset, in that order), ESCALATE_FOR (60s),
# COST_DURATION (10s), BOTS (200),
# KNOWN (4), PROCS (50), RESERVE (10), RESULTS (the file the results are
# also written to: bench/results/<UTC date and time>-flood.txt; "-" for
# none). "floodload round -h" and "floodload cost -h" list the load's knobs.
#
# The load generator, Postfix and sluice share this machine's CPUs; nothing
# is pinned. The figures that travel are the ratios and the rates of
# success; the CPU per reconnect is the instance's and sluice's alone.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

case ${1:-} in
-h | -help | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
esac
require_root "Postfix's master daemon needs it"

MODE=${MODE:-all}
case $MODE in all | flood | cost) ;; *) die "MODE=$MODE: want all, flood or cost" ;; esac
if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=1 BASE=3s WARMUP=3s DURATION=8s TIMEOUT=10s SINGLE_TIMEOUT=10s COST_DURATION=3s
fi
ROUNDS=${ROUNDS:-3} BASE=${BASE:-10s} WARMUP=${WARMUP:-30s} DURATION=${DURATION:-40s}
TIMEOUT=${TIMEOUT:-30s} SINGLE_TIMEOUT=${SINGLE_TIMEOUT:-30s} BOT_RETRY=${BOT_RETRY:-1s}
IDLE_TIMEOUT=${IDLE_TIMEOUT:-10s} ESCALATE_FOR=${ESCALATE_FOR:-60s}
COST_DURATION=${COST_DURATION:-10s}
BOTS=${BOTS:-200} KNOWN=${KNOWN:-4} PROCS=${PROCS:-50} RESERVE=${RESERVE:-10}
CAP=30 # xla-static's catch-all refuse, and the sessions held in the cost runs

tmp=$(mktemp -d /tmp/sluice-bench-flood.XXXXXX)
chmod 0711 "$tmp"
watch_pid=
declare -A pf_pid=() port=() master=() sluice_pid=() helper_pid=()
map_pid=
declare -a pf_names=()

cleanup() {
	local n
	for n in "${!sluice_pid[@]}"; do
		stop_pid "${sluice_pid[$n]}" 10
	done
	for n in "${!helper_pid[@]}"; do
		stop_pid "${helper_pid[$n]}" 10 # SIGTERM: the helper deletes its table
	done
	exec 7>&- # closes the liveness pipe: every floodload postfix and socketmap stops
	if [[ -n $map_pid ]]; then
		stop_pid "$map_pid" 10
	fi
	for n in "${!pf_pid[@]}"; do
		stop_pid "${pf_pid[$n]}" 40
	done
	if [[ -n $watch_pid ]]; then
		stop_pid "$watch_pid" 5
	fi
	rm -rf "$tmp"
}
on_exit cleanup

RESULTS=${RESULTS:-bench/results/$(date -u +%Y-%m-%d-%H%M)-flood.txt}
if [[ $RESULTS != - ]]; then
	mkdir -p "$(dirname "$RESULTS")"
	: >"$RESULTS"
fi
# say LINE... — a result line: on stdout and in the results file.
say() {
	printf '%s\n' "$*"
	[[ $RESULTS == - ]] || printf '%s\n' "$*" >>"$RESULTS"
}

log "building sluice and floodload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/floodload" ./bench/floodload
start_watchdog "$tmp" 60

# start_postfix NAME [floodload postfix flags...] — a private instance on a
# free port, in the background (wait_postfix waits for it).
start_postfix() {
	local name=$1 p
	shift
	p=$(free_tcp_port "${port[@]}")
	port[$name]=$p
	"$tmp/floodload" postfix -dir "$tmp/pf-$name" -port "$p" \
		-set "default_process_limit=$PROCS" -set smtpd_peername_lookup=no \
		-set "smtpd_timeout=$IDLE_TIMEOUT" "$@" \
		<"$tmp/alive.fifo" >"$tmp/pf-$name.out" 2>"$tmp/pf-$name.err" 7>&- &
	pf_pid[$name]=$!
	echo "pid ${pf_pid[$name]}" >>"$tmp/daemons"
	pf_names+=("$name")
}

# wait_postfix NAME — wait for NAME's ready line; sets master[NAME].
wait_postfix() {
	local line
	if ! line=$(wait_for_line "$tmp/pf-$1.out" '^(ready|failed)' 120 "${pf_pid[$1]}") || [[ $line != ready* ]]; then
		echo "$line" >&2
		tail -n 30 "$tmp/pf-$1.err" >&2
		die "the Postfix of $1 did not start"
	fi
	master[$1]=$(field "$line" master)
}

# classes KNOWN_EXTRA REST_EXTRA — the two classes, each with extra lines.
classes() {
	printf '[[class]]\nname = "known"\nmatch = ["127.0.1.0/24"]\n%s\n' "$1"
	printf '[[class]]\nname = "rest"\nmatch = ["*"]\n%s\n' "$2"
}

# write_sluice NAME DOOR SOCKET HEAD CLASSES — NAME's configuration: HEAD
# (top-level tables), CLASSES, and only DOOR (milter or anvil) on SOCKET,
# owned by postfix.
write_sluice() {
	local name=$1 door=$2 sock=$3 other
	mkdir -m 0700 "$tmp/$name-state"
	other=milter
	[[ $door == milter ]] && other=anvil
	{
		printf 'state_dir = "%s"\n%s\n%s\n' "$tmp/$name-state" "$4" "$5"
		printf '[%s]\nenabled = false\n[policy]\nenabled = false\n[throttle]\nenabled = false\n' "$other"
		printf '[%s]\nlisten = ["unix:%s"]\nmax_conns_per_peer = 0\n' "$door" "$sock"
		[[ $door == anvil ]] && printf 'allow_users = ["postfix", "root"]\n'
		printf '[%s.socket]\nowner = "postfix"\nmode = "0600"\n' "$door"
	} >"$tmp/$name.toml"
}

# start_sluice NAME SOCKET — sluice serve with NAME's configuration.
start_sluice() {
	"$tmp/sluice" serve -c "$tmp/$1.toml" </dev/null >"$tmp/$1.log" 2>&1 7>&- &
	sluice_pid[$1]=$!
	echo "pid ${sluice_pid[$1]}" >>"$tmp/daemons"
	if ! wait_for_socket "$2" 20 "${sluice_pid[$1]}"; then
		tail -n 30 "$tmp/$1.log" >&2
		die "sluice ($1) did not create $2"
	fi
}

# escalate_head NAME SOCKET — reserve_head with NAME's escalation: its own
# helper socket and nftables table, its Postfix's port.
escalate_head() {
	printf '%s\n[mta.escalate]\nsocket = "%s"\nports = [%s]\ntable = "sluicebench_%s"\nfor = "%s"\n' \
		"$reserve_head" "$tmp/$1-helper.sock" "${port[$1]}" "${1//-/_}" "$ESCALATE_FOR"
}

# start_helper NAME — sluice escalate-helper with NAME's configuration.
start_helper() {
	"$tmp/sluice" escalate-helper -c "$tmp/$1.toml" </dev/null >"$tmp/$1-helper.log" 2>&1 7>&- &
	helper_pid[$1]=$!
	echo "pid ${helper_pid[$1]}" >>"$tmp/daemons"
	if ! wait_for_socket "$tmp/$1-helper.sock" 20 "${helper_pid[$1]}"; then
		tail -n 30 "$tmp/$1-helper.log" >&2
		die "sluice escalate-helper ($1) did not create its socket"
	fi
}

# --- configurations ------------------------------------------------------------
milter_set=(-set milter_default_action=tempfail)
read -r -a rows <<<"${ROWS:-postfix-alone xla-static reserve-milter reserve-anvil escalate-milter escalate-anvil}"
((${#rows[@]})) || die "ROWS: no rows"
for r in "${rows[@]}"; do
	case $r in postfix-alone | xla-static | reserve-milter | reserve-anvil | escalate-milter | escalate-anvil) ;;
	*) die "ROWS: no row $r" ;;
	esac
done
declare -A skip=()
write_sluice xla-static milter "$tmp/xla.sock" "" "$(classes "" "refuse = $CAP")"
reserve_head=$(printf '[mta]\nsessions = %s\n' "$PROCS")
reserve_classes=$(classes "reserve = $RESERVE" "")
write_sluice reserve-milter milter "$tmp/rm.sock" "$reserve_head" "$reserve_classes"
write_sluice reserve-anvil anvil "$tmp/pf-reserve-anvil/queue/private/anvil" "$reserve_head" "$reserve_classes"
write_sluice cost-anvil anvil "$tmp/pf-cost-anvil/queue/private/anvil" "" "$(classes "" "refuse = $CAP")"
for name in reserve-milter reserve-anvil; do
	# The anvil socket's directory appears with its instance: check a copy
	# that listens in the state directory.
	sed "s#unix:$tmp/pf-reserve-anvil/queue/private/anvil#unix:$tmp/check.sock#" "$tmp/$name.toml" >"$tmp/check.toml"
	if ! msg=$("$tmp/sluice" check -c "$tmp/check.toml" 2>&1 </dev/null 7>&-); then
		skip[$name]="skipped: sluice check rejects the reserve configuration ([mta] sessions, [[class]] reserve): $(printf '%s' "$msg" | grep -m1 -v '^$' || true)"
	fi
done
rm -f "$tmp/check.toml"

# --- start ---------------------------------------------------------------------
say "flood.sh $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg) before the run, $(nproc) CPUs shared with other work"
say "sluice $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+changes'), $(/usr/sbin/postconf -d -h mail_version 2>/dev/null | sed 's/^/postfix /'), $(go env GOVERSION)"
say "MODE=$MODE QUICK=${QUICK:-0} ROUNDS=$ROUNDS BASE=$BASE WARMUP=$WARMUP DURATION=$DURATION TIMEOUT=$TIMEOUT SINGLE_TIMEOUT=$SINGLE_TIMEOUT BOT_RETRY=$BOT_RETRY IDLE_TIMEOUT=$IDLE_TIMEOUT COST_DURATION=$COST_DURATION BOTS=$BOTS KNOWN=$KNOWN PROCS=$PROCS RESERVE=$RESERVE"

log "starting the Postfix instances"
start_postfix postfix-alone
start_postfix xla-static "${milter_set[@]}" -set "smtpd_milters=unix:$tmp/xla.sock"
if [[ $MODE != cost ]]; then
	[[ -n ${skip[reserve-milter]:-} ]] || start_postfix reserve-milter "${milter_set[@]}" -set "smtpd_milters=unix:$tmp/rm.sock"
	[[ -n ${skip[reserve-anvil]:-} ]] || start_postfix reserve-anvil -own-anvil=false
	# The escalation's rule names its Postfix's port, known from here.
	start_postfix escalate-milter "${milter_set[@]}" -set "smtpd_milters=unix:$tmp/em.sock"
	start_postfix escalate-anvil -own-anvil=false
	write_sluice escalate-milter milter "$tmp/em.sock" "$(escalate_head escalate-milter)" "$reserve_classes"
	write_sluice escalate-anvil anvil "$tmp/pf-escalate-anvil/queue/private/anvil" "$(escalate_head escalate-anvil)" "$reserve_classes"
	for name in escalate-milter escalate-anvil; do
		sed "s#unix:$tmp/pf-escalate-anvil/queue/private/anvil#unix:$tmp/check.sock#" "$tmp/$name.toml" >"$tmp/check.toml"
		if ! msg=$("$tmp/sluice" check -c "$tmp/check.toml" 2>&1 </dev/null 7>&-); then
			skip[$name]="skipped: sluice check rejects [mta.escalate]: $(printf '%s' "$msg" | grep -m1 -v '^$' || true)"
		fi
	done
	rm -f "$tmp/check.toml"
fi
if [[ $MODE != flood ]]; then
	start_postfix cost-anvil -own-anvil=false
	printf '127.20.0.0/16 reject\n' >"$tmp/screen.cidr"
	start_postfix postscreen -postscreen -set "postscreen_access_list=cidr:$tmp/screen.cidr" \
		-set postscreen_denylist_action=drop
	start_postfix postscreen-map -postscreen -set "postscreen_access_list=socketmap:unix:$tmp/map.sock:flood" \
		-set postscreen_denylist_action=drop
	"$tmp/floodload" socketmap -socket "$tmp/map.sock" -reject 127.20.0.0/16 \
		<"$tmp/alive.fifo" >"$tmp/map.out" 2>"$tmp/map.err" 7>&- &
	map_pid=$!
	echo "pid $map_pid" >>"$tmp/daemons"
	if ! wait_for_line "$tmp/map.out" '^ready' 20 "$map_pid" >/dev/null; then
		cat "$tmp/map.err" >&2
		die "floodload socketmap did not start"
	fi
fi
for name in "${pf_names[@]}"; do
	wait_postfix "$name"
done
log "starting sluice"
start_sluice xla-static "$tmp/xla.sock"
[[ -z ${pf_pid[reserve-milter]:-} ]] || start_sluice reserve-milter "$tmp/rm.sock"
[[ -z ${pf_pid[reserve-anvil]:-} ]] || start_sluice reserve-anvil "$tmp/pf-reserve-anvil/queue/private/anvil"
for name in escalate-milter escalate-anvil; do
	if [[ -n ${pf_pid[$name]:-} && -z ${skip[$name]:-} ]]; then
		start_helper "$name"
	fi
done
[[ -z ${pf_pid[escalate-milter]:-} || -n ${skip[escalate-milter]:-} ]] || start_sluice escalate-milter "$tmp/em.sock"
[[ -z ${pf_pid[escalate-anvil]:-} || -n ${skip[escalate-anvil]:-} ]] || start_sluice escalate-anvil "$tmp/pf-escalate-anvil/queue/private/anvil"
[[ -z ${pf_pid[cost-anvil]:-} ]] || start_sluice cost-anvil "$tmp/pf-cost-anvil/queue/private/anvil"

# spread VALUE... — "median (min-max)".
spread() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END {
			m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf "%g (%g-%g)", m, v[1], v[NR]
		}'
}

# --- the rows ------------------------------------------------------------------
if [[ $MODE != cost ]]; then
	declare -A good=() p99=() fails=() single=() held=() cpub=() cpuf=()
	for ((round = 1; round <= ROUNDS; round++)); do
		# Rotate the order: no row always runs first.
		order=("${rows[@]:$(((round - 1) % ${#rows[@]}))}" "${rows[@]:0:$(((round - 1) % ${#rows[@]}))}")
		for r in "${order[@]}"; do
			[[ -z ${skip[$r]:-} ]] || continue
			log "round $round: $r"
			if ! out=$("$tmp/floodload" round -addr "127.0.0.1:${port[$r]}" -label "$r" \
				-sid "${master[$r]}" -pid "${sluice_pid[$r]:-0}" \
				-known "$KNOWN" -bots "$BOTS" -base "$BASE" -warmup "$WARMUP" -duration "$DURATION" \
				-timeout "$TIMEOUT" -single-timeout "$SINGLE_TIMEOUT" -bot-retry "$BOT_RETRY" 2>"$tmp/round.err" 7>&-); then
				cat "$tmp/round.err" >&2
				die "floodload round against $r failed"
			fi
			say "round $round: $out"
			# Why messages failed: the known peers' first few, the single
			# senders' by kind (floodload's "failure:" lines).
			while IFS= read -r line; do say "  $line"; done < <(grep '^failure: ' "$tmp/round.err" || true)
			if [[ -n ${helper_pid[$r]:-} ]]; then
				# How many bots the kernel drops at the end of the round.
				say "  escalation: $(/usr/sbin/nft list set inet "sluicebench_${r//-/_}" flood4 2>/dev/null | grep -o ' expires ' | wc -l) addresses in the kernel's set"
			fi
			good[$r]+=" $(field "$out" goodput)"
			p99[$r]+=" $(field "$out" p99_ms)"
			fails[$r]+=" $(field "$out" fails)"
			single[$r]+=" $(field "$out" single_rate)"
			held[$r]+=" $(field "$out" held_median)"
			cpub[$r]+=" $(field "$out" base_cpu_us)"
			cpuf[$r]+=" $(field "$out" flood_cpu_us)"
		done
	done
	for n in "${!sluice_pid[@]}"; do
		kill -0 "${sluice_pid[$n]}" 2>/dev/null || die "sluice ($n) exited during the benchmark"
	done
	say ""
	say "medians over $ROUNDS round(s) (min-max), $BOTS bots, $KNOWN known peers, $PROCS smtpd processes:"
	say "$(printf '%-15s %-22s %-26s %-18s %-22s %-14s %s' row 'goodput flood/calm' 'known p99 ms' 'known fails' 'singles accepted' 'bots holding' 'CPU us per known message, calm -> flood (Postfix + sluice)')"
	for r in "${rows[@]}"; do
		if [[ -n ${skip[$r]:-} ]]; then
			say "$(printf '%-15s %s' "$r" "${skip[$r]}")"
			continue
		fi
		# shellcheck disable=SC2086 # word splitting of the value lists is intended
		say "$(printf '%-15s %-22s %-26s %-18s %-22s %-14s %s -> %s' "$r" "$(spread ${good[$r]})" "$(spread ${p99[$r]})" \
			"$(spread ${fails[$r]})" "$(spread ${single[$r]})" "$(spread ${held[$r]})" "$(spread ${cpub[$r]})" "$(spread ${cpuf[$r]})")"
	done
fi

# --- the cost of a refusal -----------------------------------------------------
if [[ $MODE != flood ]]; then
	mechs=(accept anvil milter postscreen postscreen-map)
	declare -A m_inst=([accept]=postfix-alone [anvil]=cost-anvil [milter]=xla-static [postscreen]=postscreen
		[postscreen-map]=postscreen-map)
	declare -A m_hold=([accept]=0 [anvil]=$CAP [milter]=$CAP [postscreen]=0 [postscreen-map]=0)
	declare -A m_sluice=([anvil]=${sluice_pid[cost-anvil]} [milter]=${sluice_pid[xla-static]} [postscreen-map]=$map_pid)
	declare -A total=() pfus=() slus=()
	for ((round = 1; round <= ROUNDS; round++)); do
		order=("${mechs[@]:$(((round - 1) % ${#mechs[@]}))}" "${mechs[@]:0:$(((round - 1) % ${#mechs[@]}))}")
		for m in "${order[@]}"; do
			inst=${m_inst[$m]} spid=0 expect=refused
			[[ -z ${m_sluice[$m]:-} ]] || spid=${m_sluice[$m]}
			[[ $m != accept ]] || expect=accepted
			log "round $round: cost of a reconnect, $m"
			if ! out=$("$tmp/floodload" cost -addr "127.0.0.1:${port[$inst]}" -label "$m" -sid "${master[$inst]}" \
				-pid "$spid" -hold "${m_hold[$m]}" -expect "$expect" -duration "$COST_DURATION" 2>"$tmp/cost.err" 7>&-); then
				cat "$tmp/cost.err" >&2
				die "floodload cost ($m) failed"
			fi
			say "round $round: $out"
			total[$m]+=" $(field "$out" total_us)"
			pfus[$m]+=" $(field "$out" postfix_us)"
			slus[$m]+=" $(field "$out" sluice_us)"
		done
	done
	say ""
	say "CPU microseconds per reconnect, medians over $ROUNDS round(s) (min-max):"
	say "$(printf '%-15s %-24s %-24s %s' mechanism 'Postfix + sluice' Postfix 'sluice (or the map)')"
	best='' best_us=''
	for m in "${mechs[@]}"; do
		# shellcheck disable=SC2086 # word splitting of the value lists is intended
		say "$(printf '%-15s %-24s %-24s %s' "$m" "$(spread ${total[$m]})" "$(spread ${pfus[$m]})" "$(spread ${slus[$m]})")"
		[[ $m != accept ]] || continue
		# shellcheck disable=SC2086
		med=$(median ${total[$m]})
		if [[ -z $best ]] || awk -v a="$med" -v b="$best_us" 'BEGIN { exit !(a < b) }'; then
			best=$m best_us=$med
		fi
	done
	say "(accept is the reference: a reconnect Postfix serves, EHLO answered)"
	say "cheapest refusal: $best ($best_us us of CPU per refused reconnect, median)"
fi
say "load average $(cut -d' ' -f1-3 /proc/loadavg) after the run"
[[ $RESULTS == - ]] || log "results written to $RESULTS"
