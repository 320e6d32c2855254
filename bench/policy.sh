#!/usr/bin/env bash
# policy.sh — sluice's policy door against postfwd2 and policyd-rate-limit,
# side by side, with the same load and the same rule.
#
# The rule, for all three: each sender may send 1000 messages per 60 s,
# counted once per message at END-OF-MESSAGE; RCPT requests answer DUNNO.
# The load (bench/policyload: persistent TCP connections speaking the policy
# protocol as smtpd does, ~900-byte Postfix 3.7 requests, 1,000 clients and
# 1,000 senders, one RCPT request per recipient then one END-OF-MESSAGE
# request per message) stays far below that limit, so almost nothing is
# refused: we measure the decision path. Before the timed runs a probe sends
# 1001 one-recipient messages from one sender to each server and prints how
# many were refused (1 expected), so a server whose rule is not active shows
# up as such.
#
# Runs at c = 1, 8 and 64 connections, interleaved: in each round, for each
# c, every server gets one run, and which server goes first rotates from
# round to round. Prints every run (with the CPU time the server used per
# request, which other work on the machine disturbs less than throughput),
# a table of medians over the rounds, the issue's goals at c=64, one
# "policy ratio sluice/<server> c=<c>: X.XX" line per server and c (ratio of
# median requests per second), and ends with the c=64 ratio against postfwd.
#
# Usage (as root: it installs the packages, and drops each daemon to its own
# user):
#   bench/policy.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/policy.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/policy.sh
#   POSTFWD_CACHE=600 bench/policy.sh   postfwd with its request cache on
#
# Each server is a private instance on a free loopback port, with its
# configuration under $tmp, started and stopped by this script; the
# packages' own services are stopped and disabled. The load generator and
# the servers share this machine's CPUs; nothing is pinned, so compare
# ratios across machines rather than absolute numbers.
#
# What the two peers count, and how they are set up:
#   postfwd2 (Perl, Net::Server prefork): rate(sender/1000/60/...) in a rule
#     matching protocol_state END-OF-MESSAGE, so the same meaning as sluice's
#     rule (an anchored 60 s window rather than sluice's exact sliding one).
#     Counters live in the separate postfwd2::cache process, which every
#     child asks once per END-OF-MESSAGE request.
#   policyd-rate-limit 1.0.1 (Python, one select() loop, SQLite): counts only
#     at protocol_state RCPT, one row per RCPT request, i.e. it limits
#     recipients, not messages, and answers END-OF-MESSAGE with DUNNO without
#     looking at it. It cannot be configured to count at END-OF-MESSAGE (the
#     count_mode option came later upstream). So under this load it counts
#     about twice as many events as the others, and its probe refuses at
#     RCPT. Its SQLite database is ":memory:" (no fsync per request).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

require_root "it installs packages and runs the daemons as their own users"

run_length
# postfwd2's request cache: 0 = off (default here), else its timeout in s.
POSTFWD_CACHE=${POSTFWD_CACHE:-0}
CONCURRENCY=(1 8 64)
TARGETS=(sluice postfwd policyd-rate-limit)
PROBE_MESSAGES=1001 # the limit is 1000: expect exactly one refusal
# postfwd2 pins one prefork child per persistent connection; pre-spawn
# enough for c=64 plus spares, and never reap idle ones between runs.
POSTFWD_CHILDREN=72

tmp=$(mktemp -d /tmp/sluice-bench-policy.XXXXXX)
# The daemons run as unprivileged users and must reach their files below.
chmod 0711 "$tmp"
sluice_pid=
prl_pid=
postfwd_sid=
watch_pid=

# stop_session SID TIMEOUT_SECS — stop a daemon that detached into its own
# session SID (postfwd2: its master is the session leader, and on SIGTERM
# it signals its whole process group), then SIGKILL whatever of that
# session is left after TIMEOUT_SECS.
stop_session() {
	local sid=$1 timeout=$2 i pids
	kill -TERM "$sid" 2>/dev/null
	for ((i = 0; i < timeout * 10; i++)); do
		pgrep -s "$sid" >/dev/null || return 0
		sleep 0.1
	done
	pids=$(pgrep -s "$sid" | tr '\n' ' ')
	printf 'warning: session %s still has processes %safter %ss; killing them\n' "$sid" "$pids" "$timeout" >&2
	# shellcheck disable=SC2086 # one argument per pid
	kill -KILL $pids 2>/dev/null
	return 1
}

cleanup() {
	if [[ -n $sluice_pid ]]; then
		stop_pid "$sluice_pid" 10
	fi
	if [[ -n $prl_pid ]]; then
		stop_pid "$prl_pid" 10
	fi
	if [[ -z $postfwd_sid && -s $tmp/postfwd/master.pid ]]; then
		# Interrupted while postfwd2 was starting.
		postfwd_sid=$(tr -dc '0-9' <"$tmp/postfwd/master.pid")
	fi
	if [[ -n $postfwd_sid ]]; then
		stop_session "$postfwd_sid" 15
	fi
	if [[ -n $watch_pid ]]; then
		exec 7>&- # closes the liveness pipe: the watchdog sees EOF
		stop_pid "$watch_pid" 20
	fi
	rm -rf "$tmp"
}
on_exit cleanup

# The liveness pipe and watchdog (lib.sh): if this script dies, even by
# SIGKILL, the watchdog stops the daemons listed in $tmp/daemons and
# removes $tmp.
start_watchdog "$tmp" 15

# --- the two peers' packages ---------------------------------------------------
if [[ ! -x /usr/sbin/postfwd2 || ! -x /usr/bin/policyd-rate-limit ]]; then
	apt_install "$tmp/apt.log" postfwd policyd-rate-limit || die "could not install postfwd and policyd-rate-limit"
fi

# disable_service NAME PIDFILE — make sure the package's own daemon NAME
# neither runs nor starts at boot, with or without systemd. The packages
# enable their services on install (a policy-rc.d or a missing systemd may
# have kept them from starting).
disable_service() {
	local name=$1 pidfile=$2 pid
	if command -v systemctl >/dev/null 2>&1; then
		# "disable" only edits symlinks, so it works without a running systemd.
		systemctl disable "$name.service" >/dev/null 2>&1
		if [[ -d /run/systemd/system ]]; then
			systemctl stop "$name.service" >/dev/null 2>&1
		fi
	fi
	if command -v update-rc.d >/dev/null 2>&1; then
		update-rc.d "$name" disable >/dev/null 2>&1
	fi
	if [[ -s $pidfile ]]; then
		pid=$(tr -dc '0-9' <"$pidfile")
		if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
			log "stopping the system's $name (pid $pid)"
			"/etc/init.d/$name" stop </dev/null >/dev/null 2>&1 7>&-
			sleep 1
			if kill -0 "$pid" 2>/dev/null; then
				kill -TERM "$pid" 2>/dev/null
			fi
		fi
	fi
	return 0
}
disable_service postfwd /run/postfwd.pid
disable_service policyd-rate-limit /run/policyd-rate-limit/policyd-rate-limit.pid
# Their default endpoints: anything still there competes for the CPUs.
for port in 10040 10045; do
	if tcp_listening 127.0.0.1 "$port"; then
		log "warning: something still listens on port $port (a system postfwd?); it is left alone"
	fi
done
if [[ -S /var/spool/postfix/ratelimit/policy ]] && pgrep -f /usr/bin/policyd-rate-limit >/dev/null; then
	log "warning: a system policyd-rate-limit seems to run; it is left alone"
fi

log "building sluice and policyload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/policyload" ./bench/policyload

sluice_port=$(free_tcp_port)
postfwd_port=$(free_tcp_port "$sluice_port")
prl_port=$(free_tcp_port "$sluice_port" "$postfwd_port")

# --- sluice ----------------------------------------------------------------------
log "starting sluice serve with a policy door on 127.0.0.1:$sluice_port"
mkdir -m 0700 "$tmp/sluice-state"
cat >"$tmp/sluice.toml" <<EOF
state_dir = "$tmp/sluice-state"
[anvil]
enabled = false
[policy]
listen = ["inet:127.0.0.1:$sluice_port"]
[[policy.rule]]
name = "sender-rate"
count = "messages"            # counted once per message, at END-OF-MESSAGE
key = ["sender"]
limit = ["1000/60s exact"]
action = "DEFER_IF_PERMIT too much mail from {key}: {count}/{limit}"
EOF
"$tmp/sluice" serve -c "$tmp/sluice.toml" </dev/null >"$tmp/sluice.log" 2>&1 7>&- &
sluice_pid=$!
echo "pid $sluice_pid" >>"$tmp/daemons"
if ! wait_for_tcp 127.0.0.1 "$sluice_port" 10 "$sluice_pid"; then
	tail -n 30 "$tmp/sluice.log" >&2
	die "sluice's policy door did not come up"
fi

# --- postfwd2 --------------------------------------------------------------------
# Pitfalls handled here:
#  - postfwd2 --daemon chdirs to / before reading its rules, so a relative
#    --file silently loads none (and answers DUNNO to everything): the path
#    is absolute, and -C below shows the parsed rule.
#  - rate() needs the cache daemon, which only runs with --daemon.
#  - It logs through Sys::Syslog only, and its Net::Server policy daemon
#    dies at start-up when syslog is unavailable (no /dev/log here). Its
#    -L/--stdout switch is no way out: in daemon mode the children's STDOUT
#    is the client's socket, so log lines end up inside the policy replies.
#    So its perl loads, with -I, a stand-in Sys::Syslog (below) that appends
#    the messages to $tmp/postfwd/syslog, as a syslog daemon would.
#  - Each persistent connection pins one prefork child; with the default pool
#    (10 children, at most 50 idle) the children are forked and reaped while
#    the load runs, and throughput swings. $POSTFWD_CHILDREN are pre-spawned
#    and kept.
#  - The request cache (Debian's default: --cache=600) is off: with it each
#    request costs a round trip to the cache daemon, and a cached answer
#    skips the rate counter. Its cache key leaves out instance and queue_id
#    but keeps client_port and size, so it would rarely hit with this load
#    anyway. POSTFWD_CACHE=600 turns it on.
#  - --nodns: the rule needs no DNS lookups.
log "starting postfwd2 on 127.0.0.1:$postfwd_port ($POSTFWD_CHILDREN pre-forked children, request cache ${POSTFWD_CACHE}s)"
pf=$tmp/postfwd
mkdir -p "$pf/perl5/Sys"
pf_group=$(id -gn nobody)
chown nobody:"$pf_group" "$pf"
cat >"$pf/postfwd.cf" <<'EOF'
# Each sender may send 1000 messages per 60 s, counted once per message at
# END-OF-MESSAGE. No other rule: every other request gets the default, DUNNO.
id=SENDER_RATE; protocol_state==END-OF-MESSAGE; action=rate(sender/1000/60/DEFER_IF_PERMIT too much mail from $$sender: $$ratecount/1000)
EOF
cat >"$pf/perl5/Sys/Syslog.pm" <<'EOF'
package Sys::Syslog;
# Stand-in for Sys::Syslog, loaded (perl -I) only by the benchmark's
# postfwd2: appends each message, syslog style, to the file named by
# $ENV{BENCH_SYSLOG_FILE} instead of sending it to /dev/log.
use strict;
use warnings;
use Exporter 'import';
use POSIX ();
our $VERSION = '0.36';
our @EXPORT = qw(openlog closelog setlogmask syslog);
our @EXPORT_OK = qw(setlogsock);
our %EXPORT_TAGS = (DEFAULT => [@EXPORT], standard => [@EXPORT]);
my $fh;
my $ident = 'postfwd2';
sub _open {
	return if $fh;
	my $path = $ENV{BENCH_SYSLOG_FILE};
	return unless defined $path && $path =~ m{^(/[-\w./]+)$};
	open($fh, '>>', $1) or return;
	my $old = select $fh; $| = 1; select $old;
}
sub setlogsock { return 1 }
sub openlog { $ident = $1 if defined $_[0] && $_[0] =~ /^(.*)$/; _open(); return 1 }
sub closelog { return 1 }
sub setlogmask { return 0xff }
sub syslog {
	my ($prio, $fmt, @args) = @_;
	_open();
	return 1 unless $fh;
	my $msg = @args ? sprintf($fmt, @args) : $fmt;
	print $fh POSIX::strftime('%b %e %H:%M:%S', localtime), " $ident\[$$\]: $prio: $msg\n";
	return 1;
}
1;
EOF
chmod -R a+rX "$pf"
install -o nobody -g "$pf_group" -m 0644 /dev/null "$pf/syslog"
# postfwd2 -C exits 1 even when all is well; the rule must be listed.
/usr/sbin/postfwd2 --file "$pf/postfwd.cf" --showconfig >"$pf/showconfig" 2>&1 || true
if ! grep -q 'id->"SENDER_RATE"' "$pf/showconfig"; then
	cat "$pf/showconfig" >&2
	die "postfwd2 did not parse its rule"
fi
log "postfwd2 rule: $(grep -m1 'SENDER_RATE' "$pf/showconfig")"
BENCH_SYSLOG_FILE=$pf/syslog perl -T -w -I"$pf/perl5" /usr/sbin/postfwd2 \
	--daemon --file "$pf/postfwd.cf" \
	--server_socket "tcp:127.0.0.1:$postfwd_port" \
	--cache_socket "unix::$pf/cache.sock" \
	--pidfile "$pf/master.pid" \
	--user nobody --group "$pf_group" \
	--cache="$POSTFWD_CACHE" \
	--min_servers="$POSTFWD_CHILDREN" --max_servers=128 \
	--min_spare_servers=8 --max_spare_servers=96 \
	--summary=0 --nodns \
	</dev/null >"$pf/start.log" 2>&1 7>&- ||
	{
		cat "$pf/start.log" "$pf/syslog" >&2
		die "postfwd2 did not start"
	}
for ((i = 0; i < 100; i++)); do
	[[ -s $pf/master.pid ]] && break
	sleep 0.1
done
postfwd_sid=$(tr -dc '0-9' <"$pf/master.pid" 2>/dev/null || true)
[[ -n $postfwd_sid ]] || die "postfwd2 wrote no pid file"
echo "sid $postfwd_sid" >>"$tmp/daemons"
if ! wait_for_tcp 127.0.0.1 "$postfwd_port" 20 "$postfwd_sid"; then
	tail -n 30 "$pf/syslog" >&2
	die "postfwd2 did not listen"
fi
# Master, cache daemon, policy daemon, and the pre-forked children.
for ((i = 0; i < 300; i++)); do
	(($(pgrep -c -s "$postfwd_sid") >= POSTFWD_CHILDREN + 3)) && break
	sleep 0.1
done
log "postfwd2 runs as session $postfwd_sid with $(($(pgrep -c -s "$postfwd_sid") - 3)) policy children"

# --- policyd-rate-limit -------------------------------------------------------
# Pitfalls handled here:
#  - Started as root it creates the directory of its SQLite file and then
#    drops privileges; with database ":memory:" that directory is "" and it
#    dies (os.mkdir('')). So it is started directly as its user (setpriv),
#    which skips that step.
#  - Its packaged configuration has debug: True, which writes every request
#    and reply to stderr (syslog under systemd); off here, as in production.
#  - It listens with a backlog of 5: 64 connections made at once overflow
#    it, and each dropped SYN stalls a client for 1 s or more. policyload
#    makes each connection only after the previous one got its first reply.
#  - delay_to_close is 2 s, not 300: 1.0.1 keeps every connection it has
#    seen, closed ones too, in a dict it scans on every select() wake-up
#    (a time.time() and two Python __getattr__ calls per entry) until
#    delay_to_close after the entry's last use. With 300, the 64 closed
#    connections of each c=64 run slow it down for the next 5 minutes: on
#    this machine c=1 fell from 5.5k to 0.35k req/s after six c=64 runs.
#    2 s purges them between runs; a busy connection is never idle that
#    long. (In production smtpd processes come and go, so it pays this.)
#  - Its SQLite table gets one row per counted RCPT and is only trimmed by
#    "policyd-rate-limit --clean" from cron, which cannot reach a ":memory:"
#    database: the table grows for as long as the daemon runs.
#  - limit_by_sasl is off: the load has no SASL users (the attribute is
#    empty, which it would treat as absent anyway).
prl_user=policyd-rate-limit
getent passwd "$prl_user" >/dev/null || prl_user=nobody
prl_group=$(id -gn "$prl_user")
prl=$tmp/prl
mkdir "$prl"
chown "$prl_user:$prl_group" "$prl"
cat >"$prl/policyd-rate-limit.yaml" <<EOF
debug: False
user: "$prl_user"
group: "$prl_group"
pidfile: "$prl/policyd-rate-limit.pid"
backend: 0 # SQLite
sqlite_config:
    database: ":memory:"
SOCKET: ["127.0.0.1", $prl_port]
# Each sender may send 1000 mails per 60 s. Version 1.0.1 counts at RCPT
# only (one row per recipient) and answers every other state with DUNNO.
limits:
    - [1000, 60]
limits_by_id: {}
limit_by_sasl: False
limit_by_sender: True
limit_by_ip: False
limited_networks: []
success_action: "DUNNO"
fail_action: "DEFER_IF_PERMIT too much mail from this sender"
db_error_action: "DUNNO"
report: False
delay_to_close: 2 # see above
EOF
chmod 0644 "$prl/policyd-rate-limit.yaml"
log "starting policyd-rate-limit on 127.0.0.1:$prl_port as $prl_user"
setpriv --reuid="$prl_user" --regid="$prl_group" --clear-groups -- \
	/usr/bin/policyd-rate-limit --file "$prl/policyd-rate-limit.yaml" \
	</dev/null >"$prl/log" 2>&1 7>&- &
prl_pid=$!
echo "pid $prl_pid" >>"$tmp/daemons"
if ! wait_for_tcp 127.0.0.1 "$prl_port" 20 "$prl_pid"; then
	tail -n 30 "$prl/log" >&2
	die "policyd-rate-limit did not listen"
fi

declare -A addr=(
	[sluice]=127.0.0.1:$sluice_port
	[postfwd]=127.0.0.1:$postfwd_port
	[policyd-rate-limit]=127.0.0.1:$prl_port
)
# check_alive — die unless all three servers still run.
check_alive() {
	kill -0 "$sluice_pid" 2>/dev/null || die "sluice exited; its log: $(tail -n 5 "$tmp/sluice.log")"
	kill -0 "$prl_pid" 2>/dev/null || die "policyd-rate-limit exited; its log: $(tail -n 5 "$prl/log")"
	pgrep -f 'postfwd2::policy' -s "$postfwd_sid" >/dev/null || die "postfwd2 exited; its log: $(tail -n 5 "$pf/syslog")"
}

cpus=$(nproc)
pkgver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo '?'; }
log "postfwd $(pkgver postfwd), policyd-rate-limit $(pkgver policyd-rate-limit), $(go env GOVERSION), $cpus CPUs"

# --- probes: does each server really limit? --------------------------------------
log "probing: $PROBE_MESSAGES one-recipient messages from one sender per server"
for t in "${TARGETS[@]}"; do
	if ! out=$("$tmp/policyload" -addr "${addr[$t]}" -probe "$PROBE_MESSAGES" \
		-label "$t" 2>"$tmp/policyload.err" 7>&-); then
		echo "$out" >&2
		cat "$tmp/policyload.err" >&2
		die "the probe of $t failed"
	fi
	admitted=$(field "$out" admitted)
	refused=$(field "$out" refused)
	if ((refused > 0)); then
		echo "probe $t: admitted=$admitted refused=$refused" \
			"(first refused: message $(field "$out" first_refused);" \
			"refused at RCPT $(field "$out" refused_rcpt), at END-OF-MESSAGE $(field "$out" refused_eom):" \
			"${out#*first_action=})"
	else
		echo "probe $t: admitted=$admitted refused=$refused"
	fi
	if ((refused == 0)); then
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
		echo "!!! WARNING: $t refused none of $PROBE_MESSAGES messages from one sender:"
		echo "!!! its rule is not active, its configuration is wrong, and its numbers"
		echo "!!! below measure a server that limits nothing."
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
	elif ((admitted != PROBE_MESSAGES - 1)); then
		echo "warning: $t admitted $admitted of $PROBE_MESSAGES messages, not $((PROBE_MESSAGES - 1))"
	fi
done
check_alive

# --- timed runs --------------------------------------------------------------------
# Anything else busy on this machine skews the numbers: check while the
# servers are idle, before and after the runs.
# check_quiet WHEN — warn if the CPUs were more than 10% busy for 2 s.
check_quiet() {
	local busy
	busy=$(cpu_busy 2)
	if ((busy > 10)); then
		echo "warning: $1, with all three servers idle, the CPUs were ${busy}% busy:" \
			"other work on this machine makes these numbers noisy"
	fi
}
check_quiet "before the runs"

# server_ticks TARGET — CPU time, in clock ticks, used so far by TARGET's
# processes (postfwd2: all of its session).
clk_tck=$(getconf CLK_TCK)
server_ticks() {
	local pids p s sum=0 f
	case $1 in
	sluice) pids=$sluice_pid ;;
	policyd-rate-limit) pids=$prl_pid ;;
	postfwd) pids=$(pgrep -s "$postfwd_sid" | tr '\n' ' ') ;;
	esac
	for p in $pids; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		s=${s##*) } # fields from the 3rd on: utime and stime are the 14th and 15th
		read -r -a f <<<"$s"
		sum=$((sum + f[11] + f[12]))
	done
	echo "$sum"
}
WARMUP_SECS=0.5
declare -A rps=() p50=() p99=() p999=() errs=() cpu=()
log "duration $DURATION per run, $ROUNDS round(s), c in ${CONCURRENCY[*]}"
for ((round = 1; round <= ROUNDS; round++)); do
	# Rotate the order: round 1 starts with sluice, round 2 with postfwd, ...
	order=()
	for ((k = 0; k < ${#TARGETS[@]}; k++)); do
		order+=("${TARGETS[(k + round - 1) % ${#TARGETS[@]}]}")
	done
	for c in "${CONCURRENCY[@]}"; do
		for t in "${order[@]}"; do
			st=0
			t0=$(server_ticks "$t")
			out=$("$tmp/policyload" -addr "${addr[$t]}" -c "$c" -duration "$DURATION" \
				-warmup "${WARMUP_SECS}s" -label "$t" -seed "$round" \
				2>"$tmp/policyload.err" 7>&-) || st=$?
			t1=$(server_ticks "$t")
			if [[ $st -ne 0 && $st -ne 1 ]] || ! field "$out" rps >/dev/null; then
				echo "$out" >&2
				cat "$tmp/policyload.err" >&2
				die "policyload against $t at c=$c failed (status $st)"
			fi
			# The server's CPU time per request, over warm-up and measured
			# period (assumed to run at the measured rate).
			cpu[$t,$c]+=" $(awk -v d=$((t1 - t0)) -v hz="$clk_tck" -v r="$(field "$out" rps)" \
				-v s="$(field "$out" secs)" -v w="$WARMUP_SECS" \
				'BEGIN { printf "%.1f", (r > 0 ? d / hz / (r * (s + w)) * 1e6 : 0) }')"
			echo "round $round: $out server_cpu_us=${cpu[$t,$c]##* }"
			if ((st == 1)); then
				# Errors are counted in the line; show the first few.
				sed 's/^/  /' "$tmp/policyload.err" | head -n 5 >&2
			fi
			rps[$t,$c]+=" $(field "$out" rps)"
			p50[$t,$c]+=" $(field "$out" p50_us)"
			p99[$t,$c]+=" $(field "$out" p99_us)"
			p999[$t,$c]+=" $(field "$out" p999_us)"
			errs[$t,$c]=$((${errs[$t,$c]:-0} + $(field "$out" errors)))
		done
	done
done

# All servers must still be up: a crash during the runs would otherwise
# only show as errors above.
check_alive
check_quiet "after the runs"

echo
echo "medians over $ROUNDS round(s), $DURATION per run, $cpus CPUs shared by load generator and servers"
echo "(server_cpu_us: CPU time the server used per request, all its processes, user + system):"
printf '%-4s %-20s %12s %10s %10s %10s %14s\n' "c=" target rps p50_us p99_us p999_us server_cpu_us
declare -A med=() medp99=()
for c in "${CONCURRENCY[@]}"; do
	for t in "${TARGETS[@]}"; do
		# shellcheck disable=SC2086 # word splitting of the value lists is intended
		med[$t,$c]=$(median ${rps[$t,$c]})
		# shellcheck disable=SC2086
		medp99[$t,$c]=$(median ${p99[$t,$c]})
		# shellcheck disable=SC2086
		printf '%-4s %-20s %12.1f %10.1f %10.1f %10.1f %14.1f\n' "$c" "$t" "${med[$t,$c]}" \
			"$(median ${p50[$t,$c]})" "${medp99[$t,$c]}" "$(median ${p999[$t,$c]})" \
			"$(median ${cpu[$t,$c]})"
	done
done
for c in "${CONCURRENCY[@]}"; do
	for t in "${TARGETS[@]}"; do
		if ((${errs[$t,$c]} > 0)); then
			echo "warning: $t at c=$c had ${errs[$t,$c]} errors over all rounds"
		fi
	done
done
echo
# ratio NUM DEN — NUM/DEN with two decimals (0.00 if DEN is 0).
ratio() {
	awk -v n="$1" -v d="$2" 'BEGIN { printf "%.2f", (d > 0 ? n / d : 0) }'
}
# The issue's goals, at c=64.
r_pf=$(ratio "${med[sluice,64]}" "${med[postfwd,64]}")
r_prl=$(ratio "${med[sluice,64]}" "${med[policyd-rate-limit,64]}")
verdict() { awk -v v="$1" -v lim="$2" -v op="$3" 'BEGIN { ok = (op == ">=" ? v >= lim : v <= lim); print (ok ? "met" : "MISSED") }'; }
echo "goals at c=64: sluice/postfwd $r_pf (>= 25: $(verdict "$r_pf" 25 '>='))," \
	"sluice/policyd-rate-limit $r_prl (>= 4: $(verdict "$r_prl" 4 '>='))," \
	"sluice p99 ${medp99[sluice,64]} us (<= 3000: $(verdict "${medp99[sluice,64]}" 3000 '<='))"
echo
for c in "${CONCURRENCY[@]}"; do
	echo "policy ratio sluice/policyd-rate-limit c=$c: $(ratio "${med[sluice,$c]}" "${med[policyd-rate-limit,$c]}")"
done
# The c=64 line against postfwd comes last: CONCURRENCY is in increasing order.
for c in "${CONCURRENCY[@]}"; do
	echo "policy ratio sluice/postfwd c=$c: $(ratio "${med[sluice,$c]}" "${med[postfwd,$c]}")"
done
