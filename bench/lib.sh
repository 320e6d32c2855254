# shellcheck shell=bash
# Helpers shared by the bench/*.sh scripts. Source it; it defines functions
# only and changes no shell options.

# log MSG... — progress message on stderr.
log() {
	printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

# die MSG... — error message on stderr, then exit 1 (the EXIT trap cleans up).
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# require_root WHY — exit unless running as root.
require_root() {
	[[ $(id -u) -eq 0 ]] || die "must run as root ($1)"
}

# wait_for_socket PATH TIMEOUT_SECS [PID] — wait until PATH is a socket.
# Fails early if PID is given and that process has exited.
wait_for_socket() {
	local path=$1 timeout=$2 pid=${3:-} i
	for ((i = 0; i < timeout * 10; i++)); do
		[[ -S $path ]] && return 0
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			printf 'error: process %s exited before creating %s\n' "$pid" "$path" >&2
			return 1
		fi
		sleep 0.1
	done
	printf 'error: %s did not appear within %ss\n' "$path" "$timeout" >&2
	return 1
}

# wait_for_line FILE PATTERN TIMEOUT_SECS [PID] — wait until a line of FILE
# matches the extended regexp PATTERN and print the first such line.
wait_for_line() {
	local file=$1 pattern=$2 timeout=$3 pid=${4:-} i
	for ((i = 0; i < timeout * 10; i++)); do
		if grep -E -m1 -- "$pattern" "$file" 2>/dev/null; then
			return 0
		fi
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			grep -E -m1 -- "$pattern" "$file" 2>/dev/null && return 0
			printf 'error: process %s exited before writing /%s/ to %s\n' "$pid" "$pattern" "$file" >&2
			return 1
		fi
		sleep 0.1
	done
	printf 'error: no line /%s/ in %s within %ss\n' "$pattern" "$file" "$timeout" >&2
	return 1
}

# stop_pid PID TIMEOUT_SECS — SIGTERM a child of this shell, wait up to
# TIMEOUT_SECS for it to exit, then SIGKILL it; reaps it either way.
# Returns 0 if it exited after SIGTERM, 1 if it had to be killed.
stop_pid() {
	local pid=$1 timeout=$2 i
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < timeout * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
			return 0
		fi
		sleep 0.1
	done
	printf 'warning: pid %s ignored SIGTERM for %ss; killing it\n' "$pid" "$timeout" >&2
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	return 1
}

# median NUM... — print the median of the numbers (mean of the middle two
# for an even count).
median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END {
			if (NR == 0) exit 1
			if (NR % 2) print v[(NR + 1) / 2]
			else print (v[NR / 2] + v[NR / 2 + 1]) / 2
		}'
}

# field LINE NAME — print the value of NAME=value in a space-separated line.
field() {
	local kv
	for kv in $1; do
		if [[ $kv == "$2="* ]]; then
			printf '%s\n' "${kv#*=}"
			return 0
		fi
	done
	return 1
}

# tcp_listening HOST PORT — true if a socket listens on TCP port PORT (any
# local address, as that blocks HOST:PORT too; HOST is used only when ss(8)
# is missing and the check has to connect).
tcp_listening() {
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Hltn "sport = :$2" 2>/dev/null) ]]
	else
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
	fi
}

# free_tcp_port [PORT...] — print a TCP port that no socket uses and that
# is none of the PORTs (ports already chosen for servers not yet started).
# It is taken from 10000 up to the kernel's ephemeral range (32767 by
# default), never from that range: there, any outgoing connection on the
# machine may take the port between this check and the server's bind
# ("Address already in use", seen with other work running).
free_tcp_port() {
	local p i eph hi=32767
	if read -r eph _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && ((eph > 11000)); then
		hi=$((eph - 1))
	fi
	for ((i = 0; i < 500; i++)); do
		p=$((10000 + RANDOM % (hi - 10000 + 1)))
		[[ " $* " == *" $p "* ]] && continue
		if command -v ss >/dev/null 2>&1; then
			[[ -n $(ss -Htan "sport = :$p" 2>/dev/null) ]] && continue
		else
			tcp_listening 127.0.0.1 "$p" && continue
		fi
		printf '%s\n' "$p"
		return 0
	done
	printf 'error: found no free TCP port\n' >&2
	return 1
}

# wait_for_tcp HOST PORT TIMEOUT_SECS [PID] — wait until something listens
# on TCP port PORT. Fails early if PID is given and that process has exited.
wait_for_tcp() {
	local host=$1 port=$2 timeout=$3 pid=${4:-} i
	for ((i = 0; i < timeout * 10; i++)); do
		tcp_listening "$host" "$port" && return 0
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			printf 'error: process %s exited before listening on %s:%s\n' "$pid" "$host" "$port" >&2
			return 1
		fi
		sleep 0.1
	done
	printf 'error: nothing listened on %s:%s within %ss\n' "$host" "$port" "$timeout" >&2
	return 1
}

# cpu_busy SECS — print how busy all CPUs together were over the next SECS
# seconds, in percent of their capacity (from /proc/stat).
cpu_busy() {
	local a b
	a=$(head -n 1 /proc/stat)
	sleep "$1"
	b=$(head -n 1 /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN {
		n = split(a, x); split(b, y)
		for (i = 2; i <= n; i++) {
			d = y[i] - x[i]; total += d
			if (i == 5 || i == 6) idle += d # idle, iowait
		}
		printf "%.0f\n", (total > 0 ? 100 * (total - idle) / total : 0)
	}'
}

# run_length [DURATION ROUNDS] — set DURATION and ROUNDS: 1s and 1 round
# with QUICK=1, otherwise the environment's, or DURATION and ROUNDS given
# (5s and 3 by default).
run_length() {
	if [[ ${QUICK:-0} == 1 ]]; then
		DURATION=1s
		ROUNDS=1
	else
		DURATION=${DURATION:-${1:-5s}}
		ROUNDS=${ROUNDS:-${2:-3}}
	fi
}

# on_exit FUNCTION — run FUNCTION at exit, and turn SIGINT and SIGTERM into
# exits (status 130 and 143) so that it runs then too. FUNCTION runs
# without errexit and with INT and TERM back to their defaults, and the
# script then exits with the status it was exiting with.
on_exit() {
	# shellcheck disable=SC2064 # the function's name is meant to expand now
	trap "run_exit $1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# run_exit FUNCTION — on_exit's trap: FUNCTION, then exit with the status
# the script had.
run_exit() {
	local rc=$?
	set +e
	trap - INT TERM
	"$1"
	exit "$rc"
}

# start_watchdog DIR GRACE_SECS — a watchdog for a script's daemons, tied to
# a liveness pipe this script holds the only write end of (fd 7, to be closed
# in every long-lived child with 7>&-): when the script dies, even by
# SIGKILL, the pipe reaches EOF and the watchdog sends SIGTERM to the
# daemons listed in DIR/daemons, one "pid PID" or "sid SESSION-ID" a line
# (a session's every process), waits up to GRACE_SECS for them to go, kills
# what is left and removes DIR. After a normal cleanup (which closes fd 7
# once it has stopped the daemons itself) it finds nothing left to stop.
# Sets watch_pid; DIR/alive.fifo is the pipe, for other readers too.
start_watchdog() {
	local dir=$1 grace=$2
	mkfifo "$dir/alive.fifo"
	: >>"$dir/daemons"
	(
		set +e
		trap '' INT TERM
		cat >/dev/null # returns at EOF of the liveness pipe
		local kind id left i
		while read -r kind id; do
			case $kind in
			pid | sid) kill -TERM "$id" 2>/dev/null ;;
			esac
		done <"$dir/daemons"
		for ((i = 0; i < grace * 10; i++)); do
			left=0
			while read -r kind id; do
				case $kind in
				pid) kill -0 "$id" 2>/dev/null && left=1 ;;
				sid) pgrep -s "$id" >/dev/null && left=1 ;;
				esac
			done <"$dir/daemons"
			((left)) || break
			sleep 0.1
		done
		while read -r kind id; do
			case $kind in
			pid) kill -0 "$id" 2>/dev/null && kill -KILL "$id" 2>/dev/null ;;
			sid) pgrep -s "$id" | while read -r p; do kill -KILL "$p" 2>/dev/null; done ;;
			esac
		done <"$dir/daemons"
		rm -rf "$dir"
	) <"$dir/alive.fifo" >/dev/null 2>&1 7>&- &
	watch_pid=$!
	exec 7>"$dir/alive.fifo"
}

# apt_install LOG PACKAGE... — apt-get install the PACKAGEs, after an
# apt-get update if the first attempt fails; output goes to LOG, whose tail
# is shown if both fail (the caller then dies).
apt_install() {
	local logf=$1
	shift
	log "installing $* with apt-get"
	if DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" </dev/null >"$logf" 2>&1 7>&-; then
		return 0
	fi
	log "apt-get install failed; running apt-get update first"
	if apt-get update </dev/null >>"$logf" 2>&1 7>&- &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" </dev/null >>"$logf" 2>&1 7>&-; then
		return 0
	fi
	tail -n 20 "$logf" >&2
	return 1
}

# reference_mux — print the path of Debian's real mimedefang-multiplexor:
# where docs/mux.md's drop-in put sluice in its place, the file
# dpkg-divert moved it to (/usr/bin/mimedefang-multiplexor.distrib). Dies
# if it is missing, or if what is there is sluice (it answers as sluice
# when invoked as sluice): the benchmark would compare sluice with itself.
reference_mux() {
	local p=/usr/bin/mimedefang-multiplexor
	if command -v dpkg-divert >/dev/null; then
		p=$(dpkg-divert --truename "$p")
	fi
	p=$(readlink -f "$p") || true
	[[ -x $p ]] || die "Debian's mimedefang-multiplexor is missing (apt-get install mimedefang)"
	if (exec -a sluice "$p" -h 2>&1) | grep -q '^usage: sluice'; then
		die "$p is sluice, not Debian's mimedefang-multiplexor (docs/mux.md's drop-in without its dpkg-divert)"
	fi
	printf '%s\n' "$p"
}

# proc_ticks PID... — print the CPU time the PIDs have used so far, user
# plus system, in clock ticks (fields 14 and 15 of /proc/PID/stat, as
# bench/internal/procstat reads them for the Go drivers); a PID that is
# gone counts 0. With PROC_TICKS_CHILDREN=1 the reaped children's time
# (fields 16 and 17) counts too: a parent's children that exit during a
# run then keep their share.
proc_ticks() {
	local p s f sum=0
	for p in "$@"; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		s=${s##*) } # the command name, in parentheses, may hold anything
		read -ra f <<<"$s"
		# f[0] is field 3 (the state): fields 14-17 are f[11]-f[14].
		sum=$((sum + f[11] + f[12]))
		if [[ ${PROC_TICKS_CHILDREN:-0} == 1 ]]; then
			sum=$((sum + f[13] + f[14]))
		fi
	done
	printf '%s\n' "$sum"
}

# proc_switches PID... — print the context switches (voluntary and
# nonvoluntary) the PIDs' live threads have made so far, summed over
# /proc/PID/task/*/status; a thread that has exited no longer counts.
proc_switches() {
	local p
	for p in "$@"; do
		cat "/proc/$p/task/"*/status 2>/dev/null || true
	done | awk '$1 == "voluntary_ctxt_switches:" || $1 == "nonvoluntary_ctxt_switches:" { n += $2 }
		END { printf "%d\n", n }'
}

# per_request N REQUESTS PREC [SCALE] — print N x SCALE / REQUESTS with
# PREC decimals, 0 when no request was served: a cost per request (with
# SCALE=1e6/HZ, clock ticks become microseconds).
per_request() {
	awk -v n="$1" -v r="$2" -v p="$3" -v s="${4:-1}" 'BEGIN { printf "%.*f\n", p, (r > 0 ? n * s / r : 0) }'
}

# median_range NUM... — print "median (min-max)" of the numbers, each with
# PREC decimals (1 by default): a cost table's cell, medians over the
# rounds with their spread.
median_range() {
	local m
	m=$(median "$@") || return 1
	printf '%s\n' "$@" | sort -g | awk -v m="$m" -v p="${PREC:-1}" '{ v[NR] = $1 }
		END { printf "%.*f (%.*f-%.*f)\n", p, m, p, v[1], p, v[NR] }'
}

# cpu_ratio_line NAME NUM DEN [LIMIT] — print "NAME: X.XX (<= LIMIT:
# met|MISSED)", X the ratio of the CPU times per request NUM/DEN (the
# verdict judges the printed ratio; LIMIT 1.5 by default, issue 44's
# criterion; LIMIT "-" leaves the verdict out), or "NAME: n/a" when DEN
# is 0.
cpu_ratio_line() {
	awk -v name="$1" -v a="$2" -v b="$3" -v lim="${4:-1.5}" 'BEGIN {
		if (b <= 0) { printf "%s: n/a (the floor'"'"'s CPU time was below a clock tick)\n", name; exit }
		r = sprintf("%.2f", a / b)
		if (lim == "-") { printf "%s: %s\n", name, r; exit }
		printf "%s: %s (<= %s: %s)\n", name, r, lim, (r + 0 <= lim + 0 ? "met" : "MISSED")
	}'
}
