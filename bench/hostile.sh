#!/usr/bin/env bash
# What issue 25's adversaries cost a root-started sluice (docs/security.md):
# the start with a hostile store snapshot planted by the daemon's user (a
# link to /dev/zero, a FIFO, a 1 GiB sparse file): time to serving, RSS,
# ERROR lines; how long SIGTERM takes to end a start waiting on a Redis
# that never answers; and a flood of idle connections to the web server's
# inet listener: the daemon's descriptors and the unix socket's answer.
# There is no peer to compare with: each line is a figure of sluice's.
#
#   bench/hostile.sh [-conns N]     (root; N idle connections, default 19000)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "bench/hostile.sh: run as root (the start under test is a root start with user = \"sluice\")" >&2
	exit 1
fi
getent passwd sluice >/dev/null || { echo "bench/hostile.sh: no user sluice (adduser --system --group sluice)" >&2; exit 1; }
exec go run ./bench/hostile "$@"
