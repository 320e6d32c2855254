#!/usr/bin/env bash
# milter.sh — what sluice's milter door costs a real Postfix, side by side
# with no milter and with a libmilter milter that accepts everything.
#
# Six private Postfix 3.7 instances (bench/milterload postfix, built on
# internal/testutil/postfixtest; everything is delivered to discard(8)),
# identical but for smtpd_milters:
#   postfix-alone    no milter
#   sluice-connect   sluice serve, class caps only: the milter negotiates
#                    CONNECT alone (every other step off), so a session costs
#                    one round trip. The loopback class has refuse = 1000,
#                    far above the load, so every session is admitted.
#   sluice-all       sluice serve with milter.policy_rules and one rule that
#                    counts bytes (limit 2e9 bytes/h per client, never
#                    reached): the milter asks for every step (CONNECT, HELO,
#                    MAIL, RCPT, DATA, headers, EOH, body, EOM) and accepts.
#   libmilter        an accept-all milter on Debian's libmilter (C source
#                    written below and built in the temp dir with gcc against
#                    libmilter-dev): a callback for every step returning
#                    SMFIS_CONTINUE, SMFIS_ACCEPT at end of message.
#   libmilter-connect  the class-caps milter as an administrator would write
#                    it on libmilter (C, built the same way): a connect
#                    callback answering SMFIS_CONTINUE and xxfi_negotiate
#                    switching every other step (and its reply) off, as
#                    sluice-connect does.
#   floor            the least a CONNECT-only milter can be (C, built the
#                    same way): one thread, epoll, no limiter, no callbacks;
#                    it answers the negotiation sluice-connect sends and
#                    CONNECT and END-OF-MESSAGE with CONTINUE from static
#                    buffers. Whatever postfix-alone has over floor is the
#                    MTA's own cost of a milter, out of any milter's reach.
# milter_default_action = tempfail, and Postfix's own client limits and
# in_flow_delay are off, so that only the milter differs; max_idle is an
# hour, so the smtpd processes forked for the warm-up at c=100 stay for all
# runs (max_use keeps its default, 100 sessions per process).
#
# The load is Postfix's smtp-source at 1, 10 and 100 parallel sessions, one
# message (about 2 KB) per SMTP session, so every message costs a milter
# session: CONNECT, and with the all-events milters every other step too.
# Runs are interleaved: in each round, for each c, every target gets one run,
# and which target goes first rotates from round to round. After each run
# the script waits until Postfix's maillog shows every message so far
# delivered (discard, status=sent) and dies if one is missing. It prints
# every run (messages per second, and the milter process's CPU time per
# message), a table of medians over the rounds, the issue's goals, and one
# "milter ratio" line per pair and c; the last line is
#   milter ratio sluice-connect/postfix-alone c=10: X.XX
# preceded by the sluice-connect/floor and floor/postfix-alone lines.
#
# Then the memory figure: bench/milterload idle opens 10,000 milter sessions
# to the running sluice-connect daemon (each negotiates and sends CONNECT for
# its own client address, then idles) and reads the daemon's VmRSS before
# and after: RSS per idle session (target <= 16 KiB).
#
# Usage (as root: Postfix's master needs it; libmilter-dev is installed with
# apt-get if missing):
#   bench/milter.sh                 3 rounds, 300/2000/3000 messages at c=1/10/100
#   QUICK=1 bench/milter.sh         1 round, 100/300/500 messages, 2,000 idle sessions
#   ROUNDS=5 MSGS="500 3000 5000" IDLE=10000 bench/milter.sh
#
# smtp-source, all four Postfix instances, both sluice daemons and the
# libmilter milter share this machine's CPUs; nothing is pinned. Postfix
# itself (smtpd, cleanup, qmgr, discard) does most of the work, so the ratios
# against postfix-alone and libmilter are the figures to compare across
# machines, and even they move with whatever else runs here.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

require_root "Postfix's master daemon needs it"
command -v smtp-source >/dev/null || die "smtp-source is missing (apt-get install postfix)"
command -v gcc >/dev/null || die "gcc is missing (apt-get install gcc): it builds the C milters"

CONCURRENCY=(1 10 100)
if [[ ${QUICK:-0} == 1 ]]; then
	ROUNDS=1
	read -r -a MSGS <<<"${MSGS:-100 300 500}"
	IDLE=${IDLE:-2000}
else
	ROUNDS=${ROUNDS:-3}
	read -r -a MSGS <<<"${MSGS:-300 2000 3000}"
	IDLE=${IDLE:-10000}
fi
((${#MSGS[@]} == ${#CONCURRENCY[@]})) || die "MSGS needs one count per c (${CONCURRENCY[*]})"
TARGETS=(postfix-alone sluice-connect sluice-all libmilter libmilter-connect floor)
MSG_SIZE=2000
DRAIN_TIMEOUT=180 # seconds for Postfix to deliver what a run sent

# A short path: the milter sockets live below it (sun_path < 108 bytes).
tmp=$(mktemp -d /tmp/sluice-bench-milter.XXXXXX)
# The Postfix daemons (user postfix) must reach the milter sockets below.
chmod 0711 "$tmp"
watch_pid=
declare -A pid=()      # daemons: sluice-connect sluice-all libmilter pf-<target>
declare -A maillog=()  # per target
declare -A port=()     # per target

cleanup() {
	local k
	for k in "${!pid[@]}"; do
		[[ $k == pf-* ]] && continue
		stop_pid "${pid[$k]}" 10
	done
	exec 7>&- # closes the liveness pipe: the Postfix runners and the watchdog see EOF
	for k in "${!pid[@]}"; do
		[[ $k == pf-* ]] || continue
		stop_pid "${pid[$k]}" 40
	done
	if [[ -n $watch_pid ]]; then
		stop_pid "$watch_pid" 20
	fi
	rm -rf "$tmp"
}
on_exit cleanup

# The liveness pipe and watchdog (lib.sh): if this script dies, even by
# SIGKILL, the Postfix runners (milterload postfix: stdin, the pipe) stop
# their instances, and the watchdog stops the daemons listed in
# $tmp/daemons and removes $tmp.
start_watchdog "$tmp" 60

# --- builds ---------------------------------------------------------------------
log "building sluice and milterload in $tmp"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/milterload" ./bench/milterload

if [[ ! -f /usr/include/libmilter/mfapi.h ]]; then
	apt_install "$tmp/apt.log" libmilter-dev || die "could not install libmilter-dev"
fi
# libmilter_main NAME — the main() of the libmilter milters below: it
# listens on the socket given (backlog 128, open to the Postfix user) and
# runs libmilter's loop with NAME's smfiDesc, desc.
libmilter_main() {
	sed "s/@NAME@/$1/g" <<'EOF'
int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: @NAME@ unix:/path/to/socket\n");
		return 2;
	}
	umask(0); /* the Postfix user must be able to connect */
	if (smfi_setconn(argv[1]) == MI_FAILURE || smfi_setbacklog(128) == MI_FAILURE ||
	    smfi_register(desc) == MI_FAILURE || smfi_opensocket(1) == MI_FAILURE) {
		fprintf(stderr, "@NAME@: cannot set up %s\n", argv[1]);
		return 1;
	}
	fprintf(stderr, "@NAME@: listening on %s\n", argv[1]);
	return smfi_main() == MI_SUCCESS ? 0 : 1;
}
EOF
}

log "building the libmilter accept-all milter in $tmp"
cat >"$tmp/acceptall.c" <<'EOF'
/* acceptall: a milter on libmilter that asks for every step and accepts. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <libmilter/mfapi.h>

static sfsistat xconnect(SMFICTX *c, char *host, _SOCK_ADDR *sa) { return SMFIS_CONTINUE; }
static sfsistat xhelo(SMFICTX *c, char *helo) { return SMFIS_CONTINUE; }
static sfsistat xenvfrom(SMFICTX *c, char **argv) { return SMFIS_CONTINUE; }
static sfsistat xenvrcpt(SMFICTX *c, char **argv) { return SMFIS_CONTINUE; }
static sfsistat xheader(SMFICTX *c, char *name, char *value) { return SMFIS_CONTINUE; }
static sfsistat xeoh(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xbody(SMFICTX *c, unsigned char *chunk, size_t len) { return SMFIS_CONTINUE; }
static sfsistat xeom(SMFICTX *c) { return SMFIS_ACCEPT; }
static sfsistat xabort(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xclose(SMFICTX *c) { return SMFIS_CONTINUE; }
static sfsistat xunknown(SMFICTX *c, const char *cmd) { return SMFIS_CONTINUE; }
static sfsistat xdata(SMFICTX *c) { return SMFIS_CONTINUE; }

static struct smfiDesc desc = {
	"acceptall", SMFI_VERSION, 0,
	xconnect, xhelo, xenvfrom, xenvrcpt, xheader, xeoh, xbody, xeom,
	xabort, xclose, xunknown, xdata,
	NULL, /* no xxfi_negotiate: every step with a callback is asked for */
};

EOF
libmilter_main acceptall >>"$tmp/acceptall.c"
gcc -O2 -Wall -o "$tmp/acceptall" "$tmp/acceptall.c" -lmilter -lpthread

log "building the libmilter CONNECT-only milter in $tmp"
cat >"$tmp/connectonly.c" <<'EOF'
/* connectonly: a CONNECT-only milter on libmilter, as an administrator
 * would write one: a connect callback answering SMFIS_CONTINUE, and
 * xxfi_negotiate switching every other step off (and its reply). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <libmilter/mfapi.h>

static sfsistat xconnect(SMFICTX *c, char *host, _SOCK_ADDR *sa) { return SMFIS_CONTINUE; }

static sfsistat xnegotiate(SMFICTX *c, unsigned long f0, unsigned long f1, unsigned long f2,
                           unsigned long f3, unsigned long *pf0, unsigned long *pf1,
                           unsigned long *pf2, unsigned long *pf3) {
	unsigned long off = SMFIP_NOHELO | SMFIP_NOMAIL | SMFIP_NORCPT | SMFIP_NOBODY | SMFIP_NOHDRS |
	                    SMFIP_NOEOH | SMFIP_NOUNKNOWN | SMFIP_NODATA | SMFIP_NR_HDR | SMFIP_NR_HELO |
	                    SMFIP_NR_MAIL | SMFIP_NR_RCPT | SMFIP_NR_DATA | SMFIP_NR_UNKN | SMFIP_NR_EOH |
	                    SMFIP_NR_BODY;
	*pf0 = 0;
	*pf1 = f1 & off;
	*pf2 = 0;
	*pf3 = 0;
	return SMFIS_CONTINUE;
}

static struct smfiDesc desc = {
	"connectonly", SMFI_VERSION, 0,
	xconnect, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	NULL, NULL, NULL, NULL,
	xnegotiate,
};

EOF
libmilter_main connectonly >>"$tmp/connectonly.c"
gcc -O2 -Wall -o "$tmp/connectonly" "$tmp/connectonly.c" -lmilter -lpthread

log "building the floor milter in $tmp"
cat >"$tmp/floor.c" <<'EOF'
#define _GNU_SOURCE
/* floor: the least a CONNECT-only milter can be. One thread, epoll, no
 * limiter: it answers OPTNEG with the negotiation sluice's class-caps
 * milter sends (version 6, no actions, every step but CONNECT off and
 * reply-less) and CONNECT and END-OF-MESSAGE with CONTINUE, from static
 * buffers; every other packet is read and dropped. QUIT closes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const unsigned char optneg[17] = {0, 0, 0, 13, 'O', 0, 0, 0, 6, 0, 0, 0, 0, 0, 0x0f, 0xe3, 0xfe};
static const unsigned char cont[5] = {0, 0, 0, 1, 'c'};

struct conn {
	int fd;
	size_t len, cap;
	unsigned char *buf;
};

static void drop(int ep, struct conn *c) {
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->buf);
	free(c);
}

/* serve handles the complete packets in c's buffer; -1 ends the connection. */
static int serve(struct conn *c) {
	size_t off = 0;
	while (c->len - off >= 5) {
		unsigned char *p = c->buf + off;
		size_t n = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
		if (n == 0 || n > (1 << 20))
			return -1;
		if (c->len - off < 4 + n)
			break;
		const unsigned char *out = NULL;
		size_t outlen = 0;
		switch (p[4]) {
		case 'O': out = optneg; outlen = sizeof optneg; break;
		case 'C': case 'E': out = cont; outlen = sizeof cont; break;
		case 'Q': return -1;
		}
		if (out && write(c->fd, out, outlen) != (ssize_t)outlen)
			return -1;
		off += 4 + n;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: floor /path/to/socket\n");
		return 2;
	}
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", argv[1]);
	unlink(a.sun_path);
	umask(0); /* the Postfix user must be able to connect */
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0) {
		perror("floor: listen");
		return 1;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	fprintf(stderr, "floor: listening on %s\n", argv[1]);
	struct epoll_event evs[64];
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);
		if (k < 0 && errno != EINTR)
			return 1;
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd;
				while ((fd = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					c = calloc(1, sizeof *c);
					c->fd = fd;
					c->cap = 4096;
					c->buf = malloc(c->cap);
					struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
				}
				continue;
			}
			for (;;) {
				if (c->cap - c->len < 4096) {
					c->cap *= 2;
					c->buf = realloc(c->buf, c->cap);
				}
				ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
				if (n > 0) {
					c->len += n;
					if (serve(c) < 0) {
						drop(ep, c);
						break;
					}
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				drop(ep, c);
				break;
			}
		}
	}
}
EOF
gcc -O2 -Wall -o "$tmp/floor" "$tmp/floor.c"

# --- milters ----------------------------------------------------------------------
declare -A msock=([sluice-connect]=$tmp/sc.sock [sluice-all]=$tmp/sa.sock [libmilter]=$tmp/lm.sock
	[libmilter-connect]=$tmp/lc.sock [floor]=$tmp/fl.sock)

# sluice_config NAME EXTRA_MILTER_KEYS EXTRA_TABLES — write $tmp/NAME.toml.
sluice_config() {
	mkdir -m 0700 "$tmp/$1-state"
	cat >"$tmp/$1.toml" <<EOF
state_dir = "$tmp/$1-state"
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 1000
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:${msock[$1]}"]
max_sessions = $((IDLE + 2000))
$2
[milter.socket]
owner = "postfix"
mode = "0600"
$3
EOF
}
sluice_config sluice-connect "" ""
sluice_config sluice-all "policy_rules = true" '
[[policy.rule]]
name = "bytes"
count = "bytes"
key = ["client_address"]
limit = ["2000000000/1h smooth"]
action = "DEFER_IF_PERMIT too many bytes"'

for t in sluice-connect sluice-all; do
	log "starting sluice serve ($t) on ${msock[$t]}"
	# Each idle milter session holds a file descriptor.
	(ulimit -n "$(ulimit -Hn)" && exec "$tmp/sluice" serve -c "$tmp/$t.toml") \
		</dev/null >"$tmp/$t.log" 2>&1 7>&- &
	pid[$t]=$!
	echo "pid ${pid[$t]}" >>"$tmp/daemons"
done
log "starting the libmilter accept-all milter on ${msock[libmilter]}"
"$tmp/acceptall" "unix:${msock[libmilter]}" </dev/null >"$tmp/libmilter.log" 2>&1 7>&- &
pid[libmilter]=$!
echo "pid ${pid[libmilter]}" >>"$tmp/daemons"
log "starting the libmilter CONNECT-only milter on ${msock[libmilter-connect]}"
"$tmp/connectonly" "unix:${msock[libmilter-connect]}" </dev/null >"$tmp/libmilter-connect.log" 2>&1 7>&- &
pid[libmilter-connect]=$!
echo "pid ${pid[libmilter-connect]}" >>"$tmp/daemons"
log "starting the floor milter on ${msock[floor]}"
"$tmp/floor" "${msock[floor]}" </dev/null >"$tmp/floor.log" 2>&1 7>&- &
pid[floor]=$!
echo "pid ${pid[floor]}" >>"$tmp/daemons"
for t in sluice-connect sluice-all libmilter libmilter-connect floor; do
	if ! wait_for_socket "${msock[$t]}" 10 "${pid[$t]}"; then
		tail -n 30 "$tmp/$t.log" >&2
		die "$t did not create its socket"
	fi
done

# Each milter must ask for the steps its mode is about; a sluice that asked
# for more or fewer would measure something else.
declare -A want_steps=(
	[sluice-connect]=connect
	[sluice-all]="connect,helo,mail,rcpt,data,header,eoh,body"
	[libmilter]="connect,helo,mail,rcpt,data,header,eoh,body,unknown"
	[libmilter-connect]=connect
	[floor]=connect
)
for t in sluice-connect sluice-all libmilter libmilter-connect floor; do
	got=$("$tmp/milterload" steps -socket "${msock[$t]}" 7>&-) || die "$t: negotiation failed"
	log "$t asks for $got (end of message is always sent)"
	[[ $got == "steps=${want_steps[$t]}" ]] || die "$t asks for $got, want steps=${want_steps[$t]}"
done

# --- Postfix instances -------------------------------------------------------------
used=
for t in "${TARGETS[@]}"; do
	# shellcheck disable=SC2086 # one argument per port
	port[$t]=$(free_tcp_port $used)
	used+=" ${port[$t]}"
	args=(-dir "$tmp/pf-$t" -port "${port[$t]}"
		-set smtpd_client_connection_count_limit=0
		-set smtpd_client_connection_rate_limit=0
		-set in_flow_delay=0s
		-set default_process_limit=200
		-set max_idle=3600s
		-set milter_default_action=tempfail)
	if [[ -n ${msock[$t]:-} ]]; then
		args+=(-set "smtpd_milters=unix:${msock[$t]}")
	fi
	log "starting Postfix ($t) on 127.0.0.1:${port[$t]}"
	"$tmp/milterload" postfix "${args[@]}" <"$tmp/alive.fifo" \
		>"$tmp/pf-$t.out" 2>"$tmp/pf-$t.err" 7>&- &
	pid[pf-$t]=$!
done
for t in "${TARGETS[@]}"; do
	if ! line=$(wait_for_line "$tmp/pf-$t.out" '^ready ' 90 "${pid[pf-$t]}"); then
		cat "$tmp/pf-$t.err" >&2
		die "Postfix ($t) did not start"
	fi
	maillog[$t]=${line#ready maillog=}
done

# check_alive — die unless every daemon still runs.
check_alive() {
	local k
	for k in "${!pid[@]}"; do
		kill -0 "${pid[$k]}" 2>/dev/null || die "$k exited; see $tmp (removed at exit)"
	done
}

# delivered TARGET — messages Postfix has delivered (to discard) so far.
delivered() {
	grep -c 'postfix/discard\[.*status=sent' "${maillog[$1]}" || true
}

# wait_delivered TARGET N — wait until TARGET has delivered N messages.
declare -A sent=()
wait_delivered() {
	local t=$1 want=$2 i got
	for ((i = 0; i < DRAIN_TIMEOUT * 10; i++)); do
		got=$(delivered "$t")
		((got >= want)) && break
		sleep 0.1
	done
	if ((got != want)); then
		grep -E 'reject|warning|error|fatal' "${maillog[$t]}" | tail -n 10 >&2
		die "$t: Postfix delivered $got messages, $want were sent"
	fi
}

# ticks PID — CPU time (clock ticks, user + system) used by PID so far.
ticks() {
	local s f
	s=$(cat "/proc/$1/stat" 2>/dev/null) || {
		echo 0
		return
	}
	s=${s##*) } # fields from the 3rd on: utime and stime are the 14th and 15th
	read -r -a f <<<"$s"
	echo $((f[11] + f[12]))
}
clk_tck=$(getconf CLK_TCK)

# switches PID — context switches (voluntary and not) of PID's live threads
# so far; a thread that exited is not counted (libmilter's come and go).
switches() {
	cat "/proc/$1"/task/*/status 2>/dev/null |
		awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# run TARGET C MSGS — one smtp-source run, then wait until Postfix has
# delivered every message. Sets run_mps (messages per second, sending only)
# and run_cpu (the milter process's CPU time per message, microseconds) and
# run_cs (its context switches per message).
run_mps=
run_cpu=
run_cs=
run() {
	local t=$1 c=$2 n=$3 t0 t1 k0=0 k1=0 s0=0 s1=0
	if [[ -n ${pid[$t]:-} ]]; then
		k0=$(ticks "${pid[$t]}")
		s0=$(switches "${pid[$t]}")
	fi
	t0=$(date +%s.%N)
	if ! smtp-source -s "$c" -m "$n" -l "$MSG_SIZE" -f sender@example.org -t rcpt@example.net \
		"127.0.0.1:${port[$t]}" >"$tmp/smtp-source.out" 2>&1 7>&-; then
		cat "$tmp/smtp-source.out" >&2
		die "smtp-source against $t at c=$c failed"
	fi
	t1=$(date +%s.%N)
	if [[ -n ${pid[$t]:-} ]]; then
		k1=$(ticks "${pid[$t]}")
		s1=$(switches "${pid[$t]}")
	fi
	sent[$t]=$((${sent[$t]:-0} + n))
	wait_delivered "$t" "${sent[$t]}"
	read -r run_mps run_cpu run_cs < <(awk -v n="$n" -v a="$t0" -v b="$t1" -v k=$((k1 - k0)) -v hz="$clk_tck" \
		-v s=$((s1 - s0)) 'BEGIN { printf "%.1f %.1f %.1f\n", n / (b - a), k / hz / n * 1e6, s / n }')
}

cpus=$(nproc)
log "postfix $(/usr/sbin/postconf -d -h mail_version), libmilter $(dpkg-query -W -f '${Version}' libmilter1.0.1 2>/dev/null || echo '?'), $(go env GOVERSION), $cpus CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
log "$ROUNDS round(s), c in ${CONCURRENCY[*]} with ${MSGS[*]} messages of $MSG_SIZE bytes"

# Warm-up, not timed: master forks the smtpd and cleanup processes that
# c=100 needs (they then stay: max_idle = 3600s), and the milters see their
# first sessions.
for t in "${TARGETS[@]}"; do
	run "$t" 100 200
done
check_alive

busy=$(cpu_busy 2)
if ((busy > 10)); then
	echo "warning: before the runs, with every daemon idle, the CPUs were ${busy}% busy:" \
		"other work on this machine makes these numbers noisy"
fi

declare -A mps=() cpu=() cs=()
for ((round = 1; round <= ROUNDS; round++)); do
	order=()
	for ((k = 0; k < ${#TARGETS[@]}; k++)); do
		order+=("${TARGETS[(k + round - 1) % ${#TARGETS[@]}]}")
	done
	for ((ci = 0; ci < ${#CONCURRENCY[@]}; ci++)); do
		c=${CONCURRENCY[ci]}
		n=${MSGS[ci]}
		for t in "${order[@]}"; do
			run "$t" "$c" "$n"
			printf 'round %d: target=%s c=%d msgs=%d delivered=%d msgs_per_s=%s milter_cpu_us_per_msg=%s milter_cs_per_msg=%s\n' \
				"$round" "$t" "$c" "$n" "$n" "$run_mps" "$run_cpu" "$run_cs"
			mps[$t,$c]+=" $run_mps"
			cpu[$t,$c]+=" $run_cpu"
			cs[$t,$c]+=" $run_cs"
		done
	done
done
check_alive
busy=$(cpu_busy 2)
if ((busy > 10)); then
	echo "warning: after the runs, with every daemon idle, the CPUs were ${busy}% busy:" \
		"other work on this machine makes these numbers noisy"
fi
for t in "${TARGETS[@]}"; do
	echo "delivered $t: $(delivered "$t") of ${sent[$t]} sent (warm-up included)"
done

echo
echo "medians over $ROUNDS round(s), one message of $MSG_SIZE bytes per SMTP session, $cpus CPUs shared by smtp-source, Postfix and the milters"
echo "(milter_cpu_us: CPU time of the milter process per message, user + system;"
echo "milter_cs: its context switches per message, threads alive at the end of the run only;"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)):"
printf '%-4s %-18s %12s %14s %10s\n' "c=" target msgs_per_s milter_cpu_us milter_cs
declare -A med=()
for c in "${CONCURRENCY[@]}"; do
	for t in "${TARGETS[@]}"; do
		# shellcheck disable=SC2086 # word splitting of the value lists is intended
		med[$t,$c]=$(median ${mps[$t,$c]})
		# shellcheck disable=SC2086
		# shellcheck disable=SC2086
		printf '%-4s %-18s %12.1f %14.1f %10.1f\n' "$c" "$t" "${med[$t,$c]}" "$(median ${cpu[$t,$c]})" "$(median ${cs[$t,$c]})"
	done
done

# --- memory: idle milter sessions held open against sluice-connect ---------------
echo
log "opening $IDLE idle milter sessions to sluice-connect (pid ${pid[sluice-connect]})"
if ! mem=$(ulimit -n "$(ulimit -Hn)" && "$tmp/milterload" idle -socket "${msock[sluice-connect]}" \
	-n "$IDLE" -pid "${pid[sluice-connect]}" 2>"$tmp/idle.err" 7>&-); then
	cat "$tmp/idle.err" >&2
	die "the idle sessions could not be opened"
fi
check_alive
per=$(field "$mem" per_session_bytes)
echo "memory: $mem"
awk -v b="$per" -v n="$IDLE" 'BEGIN {
	printf "Memory: RSS with %d idle milter sessions open: %.1f KiB per session (target <= 16 KiB: %s)\n",
		n, b / 1024, (b <= 16384 ? "met" : "MISSED")
}'

echo
# ratio NUM DEN — NUM/DEN with two decimals (0.00 if DEN is 0).
ratio() {
	awk -v n="$1" -v d="$2" 'BEGIN { printf "%.2f", (d > 0 ? n / d : 0) }'
}
verdict() { awk -v v="$1" -v lim="$2" 'BEGIN { print (v >= lim ? "met" : "MISSED") }'; }
g1=$(ratio "${med[sluice-connect,1]}" "${med[postfix-alone,1]}")
g10=$(ratio "${med[sluice-connect,10]}" "${med[postfix-alone,10]}")
f1=$(ratio "${med[sluice-connect,1]}" "${med[floor,1]}")
f10=$(ratio "${med[sluice-connect,10]}" "${med[floor,10]}")
echo "goals: sluice-connect/postfix-alone c=1 $g1 (>= 0.80: $(verdict "$g1" 0.80))," \
	"c=10 $g10 (>= 0.80: $(verdict "$g10" 0.80));" \
	"sluice-connect/floor c=1 $f1 (>= 0.95: $(verdict "$f1" 0.95)), c=10 $f10 (>= 0.95: $(verdict "$f10" 0.95));" \
	"sluice-all/libmilter $(for c in "${CONCURRENCY[@]}"; do
		r=$(ratio "${med[sluice-all,$c]}" "${med[libmilter,$c]}")
		printf 'c=%s %s (>= 1.2: %s) ' "$c" "$r" "$(verdict "$r" 1.2)"
	done)"
echo "(floor/postfix-alone is the most any CONNECT-only milter can reach: c=1 $(ratio "${med[floor,1]}" "${med[postfix-alone,1]}")," \
	"c=10 $(ratio "${med[floor,10]}" "${med[postfix-alone,10]}"))"
echo
for c in "${CONCURRENCY[@]}"; do
	echo "milter ratio sluice-all/libmilter c=$c: $(ratio "${med[sluice-all,$c]}" "${med[libmilter,$c]}")"
done
for c in "${CONCURRENCY[@]}"; do
	echo "milter ratio sluice-all/postfix-alone c=$c: $(ratio "${med[sluice-all,$c]}" "${med[postfix-alone,$c]}")"
done
for c in "${CONCURRENCY[@]}"; do
	echo "milter ratio sluice-connect/libmilter-connect c=$c: $(ratio "${med[sluice-connect,$c]}" "${med[libmilter-connect,$c]}")"
done
for c in "${CONCURRENCY[@]}"; do
	echo "milter ratio floor/postfix-alone c=$c: $(ratio "${med[floor,$c]}" "${med[postfix-alone,$c]}")"
done
for c in 100 1 10; do
	echo "milter ratio sluice-connect/floor c=$c: $(ratio "${med[sluice-connect,$c]}" "${med[floor,$c]}")"
done
for c in 100 1 10; do
	echo "milter ratio sluice-connect/postfix-alone c=$c: $(ratio "${med[sluice-connect,$c]}" "${med[postfix-alone,$c]}")"
done
