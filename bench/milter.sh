#!/usr/bin/env bash
# milter.sh — what sluice's milter door costs a real Postfix, side by side
# with no milter, with libmilter milters and with a floor milter.
#
# The benchmark is bench/milterbench (Go; "go doc ./bench/milterbench" has
# the targets, the load and what it prints, and the C milters it builds are
# in bench/milterbench/c/). This wrapper checks for root and the tools,
# installs libmilter-dev with apt-get if missing, and runs the driver from
# the repository's root. The last line is
#   milter ratio sluice-connect/postfix-alone c=10: X.XX
#
# Usage (as root: Postfix's master needs it):
#   bench/milter.sh                 3 rounds, 1000/2000/3000 messages at c=1/10/100
#   QUICK=1 bench/milter.sh         1 round, 100/300/500 messages, 2,000 idle sessions
#   ROUNDS=5 MSGS="500 3000 5000" IDLE=10000 bench/milter.sh
#   BASELINE=/tmp/sluice-old bench/milter.sh
#                                   that binary measured too, as a seventh
#                                   target (baseline-connect): a change
#                                   measured before and after in one run
#   TARGETS="postfix-alone sluice-connect libmilter-connect floor" ROUNDS=7 bench/milter.sh
#                                   only those targets (postfix-alone and
#                                   sluice-connect always among them): more
#                                   rounds of one comparison per minute
#   bench/milter.sh -h              the driver's flags (-quick, -rounds, -msgs,
#                                   -idle, -baseline, -targets: the same knobs;
#                                   a flag wins)
# Environment: QUICK=1 (one round, smaller MSGS and IDLE defaults; ROUNDS is
# then ignored), ROUNDS (3), MSGS (one count per c), IDLE (idle sessions),
# BASELINE (an older sluice binary), TARGETS (a subset of the targets).
#
# smtp-source, the six Postfix instances (seven with BASELINE, fewer with
# TARGETS), the sluice
# daemons and the C milters share this machine's CPUs; nothing is pinned,
# so compare the ratios (printed with their spread over the rounds), not
# the rates.
set -euo pipefail

# BASELINE is a path as the caller sees it: made absolute before the cd.
if [[ -n ${BASELINE:-} ]]; then
	BASELINE=$(realpath -- "$BASELINE") || exit 1
	export BASELINE
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

case ${1:-} in
-h | -help | --help) exec go run ./bench/milterbench -h ;;
esac
require_root "Postfix's master daemon needs it"
command -v smtp-source >/dev/null || die "smtp-source is missing (apt-get install postfix)"
command -v cc >/dev/null || die "cc is missing (apt-get install gcc): it builds the C milters"
if [[ ! -f /usr/include/libmilter/mfapi.h ]]; then
	aptlog=$(mktemp /tmp/sluice-bench-apt.XXXXXX)
	apt_install "$aptlog" libmilter-dev || die "could not install libmilter-dev"
	rm -f "$aptlog"
fi
exec go run ./bench/milterbench "$@"
