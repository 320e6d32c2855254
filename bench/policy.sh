#!/usr/bin/env bash
# policy.sh — sluice's policy door against postfwd2 and policyd-rate-limit,
# side by side, with the same load and the same rule (each sender 1000
# messages per 60 s, counted at END-OF-MESSAGE).
#
# The benchmark is bench/policybench (Go; "go doc ./bench/policybench" has
# the rule, the load, how each peer is set up and what it prints). This
# wrapper checks for root, installs postfwd and policyd-rate-limit with
# apt-get if missing, and runs the driver from the repository's root (it
# disables the packages' own services, and runs each server as a private
# instance on a free loopback port), beside the floor (bench/policyfloor:
# read to the empty line, answer DUNNO), the C floor (bench/protofloor.c,
# the same answer from one thread on epoll, built with cc) and, with
# BASELINE, an older sluice. Every run carries the server's CPU time and
# context switches per request; a cost table gives their medians with the
# rounds' range, then one "policy cpu sluice/cfloor c=<c>: X.XX" line per c.
# It prints one "policy ratio sluice/<server> c=<c>: X.XX" line per server
# and c, and ends with the c=64 ratio against postfwd.
#
# Usage (as root: it installs the packages, and drops each daemon to its own
# user):
#   bench/policy.sh                 5 s per run, 3 rounds
#   QUICK=1 bench/policy.sh         1 s per run, 1 round
#   DURATION=10s ROUNDS=5 bench/policy.sh
#   POSTFWD_CACHE=600 bench/policy.sh   postfwd with its request cache on
#   BASELINE=/tmp/sluice-old bench/policy.sh   that binary measured too
#   bench/policy.sh -h              the driver's flags (-quick, -duration,
#                                   -rounds, -postfwd-cache: the same knobs;
#                                   a flag wins)
# Environment: QUICK=1 (DURATION and ROUNDS are then ignored), DURATION
# (5s), ROUNDS (3), POSTFWD_CACHE (0: postfwd2's request cache off),
# BASELINE (none).
#
# The load generator and the servers share this machine's CPUs; nothing is
# pinned, so compare the ratios (printed with their spread over the
# rounds), not the absolute numbers.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

case ${1:-} in
-h | -help | --help) exec go run ./bench/policybench -h ;;
esac
require_root "it installs packages and runs the daemons as their own users"
command -v cc >/dev/null || die "cc is missing (apt-get install gcc): it builds the C floor"
if [[ ! -x /usr/sbin/postfwd2 || ! -x /usr/bin/policyd-rate-limit ]]; then
	aptlog=$(mktemp /tmp/sluice-bench-apt.XXXXXX)
	apt_install "$aptlog" postfwd policyd-rate-limit || die "could not install postfwd and policyd-rate-limit"
	rm -f "$aptlog"
fi
exec go run ./bench/policybench "$@"
