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

# free_tcp_port [PORT...] — print a TCP port in 20000-52767 that nothing
# listens on and that is none of the PORTs (ports already chosen for
# servers not yet started).
free_tcp_port() {
	local p i
	for ((i = 0; i < 500; i++)); do
		p=$((20000 + RANDOM % 32768))
		[[ " $* " == *" $p "* ]] && continue
		tcp_listening 127.0.0.1 "$p" && continue
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
