#!/usr/bin/env bash
# Puts in place, on this Debian host, what an administrator who followed
# docs/operations.md and docs/mux.md has, so that a test run proves the
# tests do not depend on the host they run on:
#
#   - sluice installed as /usr/local/bin/sluice, and `sluice serve`
#     running as root on its embedded defaults (sockets in /run/sluice,
#     state in /var/lib/sluice);
#   - docs/mux.md's drop-in: /usr/bin/mimedefang-multiplexor and
#     /usr/bin/md-mx-ctrl diverted (dpkg-divert --local --rename, Debian's
#     binaries become X.distrib) and linked to /usr/local/bin/sluice.
#
# A test that reaches the daemon or the default paths, or that takes
# /usr/bin/mimedefang-multiplexor for the reference, fails or compares
# sluice with sluice; the tests must find the real reference
# (internal/testutil/muxref) and keep to directories of their own.
#
#   scripts/installed-host.sh up SLUICE_BINARY   set it up (first undoing what an earlier run left)
#   scripts/installed-host.sh down               undo what "up" did, and only that
#
# Root only. Each thing "up" does is recorded in $rec (persistent, as
# dpkg's diversions are) before it is done, so "down" undoes exactly that,
# also after a run that was killed, and a second "up" or "down" is
# harmless. What the host already had (an administrator's own daemon,
# binary or diversion) is left as it is, and the tests run against it.
# The daemon's log goes to $SLUICE_HOST_LOG (default $rec/daemon.log,
# removed by "down"). scripts/test.sh holds /run/lock/sluice-test.lock
# while it uses the set-up; by hand, hold it too:
#   flock /run/lock/sluice-test.lock sh -c 'scripts/installed-host.sh up BIN && go test ...; scripts/installed-host.sh down'

set -euo pipefail

rec=/var/lib/sluice-test-host
bin=/usr/local/bin/sluice
diverted=(/usr/bin/mimedefang-multiplexor /usr/bin/md-mx-ctrl)

# answers reports whether a sluice daemon answers on the default web
# socket (sluice status as root with no flags asks /run/sluice/web).
answers() { clean "$1" status -t 2s >/dev/null 2>&1; }

# clean runs a command as root's shell would with nothing of this
# script's environment (STATE_DIRECTORY, NOTIFY_SOCKET...): on the
# defaults.
cleanpath=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
clean() { env -i PATH="$cleanpath" HOME=/root "$@"; }

up() {
	local src=$1 log pid
	[ -x "$src" ] || { echo "installed-host: $src is not an executable" >&2; return 1; }
	down
	mkdir -p "$rec"
	[ -e /var/lib/sluice ] || : >"$rec/state-dir"
	[ -e /run/sluice ] || : >"$rec/runtime-dir"
	if [ ! -e "$bin" ]; then
		: >"$rec/binary"
		install -m 0755 "$src" "$bin"
	fi
	for f in "${diverted[@]}"; do
		if [ -e "$f" ] && [ -z "$(dpkg-divert --listpackage "$f")" ]; then
			: >"$rec/divert-${f##*/}"
			dpkg-divert --local --rename --add "$f" >/dev/null
			ln -s "$bin" "$f"
		fi
	done
	if answers "$src"; then
		echo "installed-host: a sluice daemon already answers on /run/sluice/web; the tests run beside it"
	else
		log=${SLUICE_HOST_LOG:-$rec/daemon.log}
		# A simple command, not the function clean: bash runs it in a
		# child that env replaces with sluice, so $! is the daemon's pid.
		env -i PATH="$cleanpath" HOME=/root "$bin" serve </dev/null >"$log" 2>&1 &
		pid=$!
		echo "$pid $(readlink -f "$bin")" >"$rec/daemon"
		for _ in $(seq 100); do
			answers "$src" && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if ! answers "$src"; then
			echo "installed-host: sluice serve on the defaults did not come up; its log ($log):" >&2
			cat "$log" >&2
			return 1
		fi
	fi
	echo "installed-host: sluice serve answers on /run/sluice/web (state /var/lib/sluice);" \
		"$(for f in "${diverted[@]}"; do printf '%s -> %s, ' "$f" "$(readlink "$f" || echo "$f")"; done)" \
		"Debian's originals at .distrib"
}

# stop_daemon ends the daemon "up" started, if it still runs that binary.
stop_daemon() {
	local pid exe
	read -r pid exe <"$rec/daemon" || return 0
	[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

down() {
	local f
	[ -d "$rec" ] || return 0
	[ -e "$rec/daemon" ] && stop_daemon
	for f in "${diverted[@]}"; do
		[ -e "$rec/divert-${f##*/}" ] || continue
		[ -L "$f" ] && rm -f "$f"
		if [ -n "$(dpkg-divert --listpackage "$f")" ]; then
			dpkg-divert --local --rename --remove "$f" >/dev/null
		fi
	done
	[ -e "$rec/binary" ] && rm -f "$bin"
	[ -e "$rec/state-dir" ] && rm -rf /var/lib/sluice
	[ -e "$rec/runtime-dir" ] && rm -rf /run/sluice
	rm -rf "$rec"
}

case "${1:-}" in
up) up "${2:?usage: $0 up SLUICE_BINARY}" ;;
down) down ;;
*)
	echo "usage: $0 up SLUICE_BINARY | down" >&2
	exit 2
	;;
esac
