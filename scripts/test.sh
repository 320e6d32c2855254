#!/usr/bin/env bash
# Runs every sluice check and test: gofmt, go vet, staticcheck, the unit and
# integration tests under the race detector, and short fuzz runs.
#
# The integration tests start their own private servers (a Postfix instance
# under a temp dir, on loopback ports and sockets of their own). Run as root
# on Debian, this script first installs the packages they need with apt-get,
# and runs the tests beside an installed sluice (its daemon on the default
# paths, the multiplexor's drop-in: scripts/installed-host.sh), undone at
# exit; without root it says loudly which suites will be skipped.
#
# Environment: FUZZTIME (default 5s) per fuzz target, FUZZ_JOBS (default:
# the CPUs) targets at a time with FUZZ_WORKERS (default 1) workers each,
# and, when set, how long the mux differential fuzzer
# (TestMuxDifferentialFuzz, run with the tests; unset, it plays its four
# fixed schedules) draws new ones;
# SKIP_FUZZ=1 skips the fuzz targets;
# SLUICE_ARTIFACTS (default ./artifacts) receives screenshots and the test
# events (go-test.json); SLUICE_REQUIRE_PEERS (default 1 as root or in CI)
# makes a test whose real peer is missing fail instead of skip.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# Debian packages the integration tests drive, as "package:file". Net::DNS
# is used by mimedefang.pl (Mail::MIMEDefang::Net) though Debian's
# mimedefang 3.3 does not depend on it: without it every worker dies at once.
packages=(postfix:/usr/sbin/postfix postfix:/usr/sbin/smtp-source redis-server:/usr/bin/redis-server redis-tools:/usr/bin/redis-cli
	mimedefang:/usr/bin/mimedefang-multiplexor miltertest:/usr/bin/miltertest m4:/usr/bin/m4
	chromium:/usr/bin/chromium systemd:/usr/bin/systemd-socket-activate systemd:/usr/bin/systemd-analyze
	libnet-dns-perl:/usr/share/perl5/Net/DNS.pm man-db:/usr/bin/man iproute2:/usr/sbin/ip adduser:/usr/sbin/adduser
	nftables:/usr/sbin/nft)
# One run at a time on a host, as root: what scripts/installed-host.sh
# sets up below is the host's. The lock (on descriptor 9, closed for the
# commands below that start daemons or run long) goes with this process,
# however it ends. A run that was killed may have left that set-up in
# place: undo it before looking at what is installed.
if [ "$(id -u)" = 0 ]; then
	exec 9>/run/lock/sluice-test.lock
	if ! flock -n 9; then
		echo "waiting for another scripts/test.sh run on this host (/run/lock/sluice-test.lock)" >&2
		flock 9
	fi
	scripts/installed-host.sh down 9>&-
fi
missing=()
for p in "${packages[@]}"; do
	pkg=${p%%:*} bin=${p#*:}
	if [ ! -e "$bin" ] && [[ " ${missing[*]-} " != *" $pkg "* ]]; then
		missing+=("$pkg")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		step "installing ${missing[*]}"
		# Postfix must not configure or start a system instance: the tests
		# run private instances of their own.
		echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -q "${missing[@]}" || { apt-get update -q && apt-get install -y -q "${missing[@]}"; }
		# The tests start their own servers on ports and sockets of their
		# own; the packaged services are not needed.
		for svc in redis-server mimedefang; do
			if [[ " ${missing[*]} " == *" $svc "* ]] && [ -x "/etc/init.d/$svc" ]; then
				"/etc/init.d/$svc" stop >/dev/null 2>&1 || echo "note: the packaged $svc service could not be stopped; the tests do not use it" >&2
			fi
		done
	else
		echo "!!!!!!!! SKIPPING: ${missing[*]} not installed and this is not root on Debian;" >&2
		echo "!!!!!!!! the suites that need them (Postfix, Sendmail, Redis, MIMEDefang, miltertest, the browser test) will be skipped. Run as root to install them." >&2
	fi
fi

# The deployment tests run each door as it is deployed: sluice as its own
# system user, qmail-remote's wrapper as qmailr with group qmail and
# qmail-smtpd's user qmaild with group nofiles (qmail's users), Postfix as
# postfix, MIMEDefang as defang. Make the ones no package made, as an
# administrator following the docs would; qmail's exactly as its
# INSTALL.ids has them, correcting what an earlier run made otherwise.
if [ "$(id -u)" = 0 ]; then
	getent group sluice >/dev/null || addgroup --system --quiet sluice
	getent passwd sluice >/dev/null || adduser --system --quiet --ingroup sluice --no-create-home --home /var/lib/sluice sluice
	# qmail_user USER GROUP HOME: a system user with that primary group
	# and home (never created), and in neither of qmail's groups besides.
	qmail_user() {
		if ! getent passwd "$1" >/dev/null; then
			adduser --system --quiet --ingroup "$2" --no-create-home --home "$3" "$1"
			return
		fi
		if [ "$(id -gn "$1")" != "$2" ]; then
			echo "note: user $1 had primary group $(id -gn "$1"), qmail's INSTALL.ids gives it $2: usermod -g $2 $1" >&2
			usermod -g "$2" "$1"
		fi
		if [ "$(getent passwd "$1" | cut -d: -f6)" != "$3" ]; then
			echo "note: user $1 had home $(getent passwd "$1" | cut -d: -f6), qmail's INSTALL.ids gives it $3: usermod -d $3 $1" >&2
			usermod -d "$3" "$1"
		fi
		for g in nofiles qmail; do
			if [ "$g" != "$2" ] && [[ " $(id -Gn "$1") " == *" $g "* ]]; then
				echo "note: user $1 was also in group $g, where qmail's INSTALL.ids does not put it: gpasswd -d $1 $g" >&2
				gpasswd -d "$1" "$g" >/dev/null
			fi
		done
	}
	getent group nofiles >/dev/null || addgroup --system --quiet nofiles
	getent group qmail >/dev/null || addgroup --system --quiet qmail
	qmail_user alias nofiles /var/qmail/alias
	for u in qmaild qmaill qmailp; do qmail_user "$u" nofiles /var/qmail; done
	for u in qmailq qmailr qmails; do qmail_user "$u" qmail /var/qmail; done
fi

# The Sendmail tests fetch Debian's sendmail packages privately (apt-get
# download; Postfix stays the system MTA): the package lists must exist.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	apt-get download --print-uris sendmail-bin >/dev/null 2>&1 || apt-get update -q >/dev/null || true
fi

# Real-peer gating: with SLUICE_REQUIRE_PEERS=1 a test whose real peer
# (Postfix, Sendmail, redis-server, MIMEDefang, miltertest, Chromium,
# systemd, root, a system user) is missing fails instead of skipping. It is
# on by default as root and in CI, where this script installed every peer;
# elsewhere such tests are skipped and listed at the end of the run.
if [ -z "${SLUICE_REQUIRE_PEERS:-}" ]; then
	if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
		SLUICE_REQUIRE_PEERS=1
	else
		SLUICE_REQUIRE_PEERS=0
	fi
fi
export SLUICE_REQUIRE_PEERS

step gofmt
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

step "go vet"
go vet ./...

step staticcheck
go tool staticcheck ./...

step govulncheck
# Known vulnerabilities in the code paths sluice uses. The database lives
# at vuln.go.dev; where it cannot be reached the step says so and goes on.
if command -v curl >/dev/null && curl -fsS --max-time 10 -o /dev/null https://vuln.go.dev/index/db.json 2>/dev/null; then
	go run golang.org/x/vuln/cmd/govulncheck@v1.1.4 ./...
else
	echo "!!!!!!!! SKIPPING govulncheck: the Go vulnerability database (vuln.go.dev) cannot be reached from here" >&2
fi

# What tests leave for people to look at (the status page's screenshot,
# the installed daemon's log).
export SLUICE_ARTIFACTS="${SLUICE_ARTIFACTS:-$PWD/artifacts}"
mkdir -p "$SLUICE_ARTIFACTS"

# The tests must not depend on the host: as root, the rest of the run
# (tests and fuzzing) happens on a host set up as an administrator
# following docs/operations.md and docs/mux.md would have it: sluice
# installed and `sluice serve` running on its defaults (/run/sluice,
# /var/lib/sluice), and MIMEDefang's multiplexor and md-mx-ctrl diverted
# with sluice linked in their places (scripts/installed-host.sh). A test
# that reached that daemon or those paths, or took the drop-in for the
# reference, would fail or compare sluice with itself. All of it is
# undone when the script exits, whichever way it exits.
if [ "$(id -u)" = 0 ] && command -v dpkg-divert >/dev/null; then
	step "an installed sluice: a daemon on the default paths, the multiplexor's drop-in"
	hostbin=$(mktemp -d)
	trap 'scripts/installed-host.sh down 9>&-; rm -rf "$hostbin"' EXIT
	go build -o "$hostbin/sluice" ./cmd/sluice
	SLUICE_HOST_LOG="$SLUICE_ARTIFACTS/installed-sluice.log" scripts/installed-host.sh up "$hostbin/sluice" 9>&-
else
	echo "!!!!!!!! not root on Debian: the tests run without an installed sluice beside them (scripts/installed-host.sh)" >&2
fi

step "go test -race -shuffle=on (SLUICE_REQUIRE_PEERS=${SLUICE_REQUIRE_PEERS})"
# gotestsum runs go test -json and prints a line per package, the whole
# output of every failed test, and at the end every skipped test with its
# reason: a skip is never silent. The tests mostly wait on their real
# peers (this run keeps about a third of two CPUs busy), so four packages
# and four parallel tests of a package run at a time, not one per CPU.
go tool gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg \
	--jsonfile "$SLUICE_ARTIFACTS/go-test.json" -- \
	-race -shuffle=on -count=1 -p 4 -parallel 4 -timeout 20m ./... 9>&-

step "go test without the race detector: the doors' raw socket I/O"
# Every door reads and writes with raw system calls on Linux
# (internal/rawio: the milter's packets, netserve's connections for
# anvil, policy, throttle and the socket map), the path every production
# build takes; -race builds use net.Conn instead (raw calls bypass the race
# detector's annotations), so the run above never takes it. Those doors'
# tests and the daemon's (the real-MTA tests among them) again, built as
# production is.
go tool gotestsum --format pkgname-and-test-fails -- \
	-count=1 -timeout 10m ./internal/rawio/ ./internal/netserve/ ./internal/milter/... ./internal/anvil/... \
	./internal/policy/ ./internal/throttle/ ./internal/socketmap/ ./internal/app/ 9>&-

# fuzz_target DIR NAME fuzzes one target for FUZZTIME. Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" when
# -fuzztime expires while a worker is mid-call (go.dev/issue/75804, fixed in
# Go 1.27): no input failed and none is written. Only that exact outcome is
# retried, once, and said so; a real finding ("Failing input written") or a
# second failure fails the run.
fuzz_target() {
	local dir=$1 name=$2 out rc
	for attempt in 1 2; do
		rc=0
		out=$(go test -run='^$' -fuzz="^${name}\$" -fuzztime="${FUZZTIME:-5s}" -parallel="${FUZZ_WORKERS:-1}" "$dir" 2>&1 9>&-) || rc=$?
		printf -- '-- %s %s\n%s\n' "$dir" "$name" "$out"
		[ "$rc" = 0 ] && return 0
		if [ "$attempt" = 1 ] && grep -q '^    context deadline exceeded$' <<<"$out" &&
			! grep -q 'Failing input written' <<<"$out"; then
			echo "!! $name: Go fuzz coordinator deadline race (go.dev/issue/75804), no failing input; running it again" >&2
			continue
		fi
		echo "!! $name failed" >&2
		return "$rc"
	done
}

if [ "${SKIP_FUZZ:-}" != 1 ]; then
	# FUZZ_JOBS targets at a time (default: one per CPU), each with
	# FUZZ_WORKERS fuzzing processes (default 1): the same CPU as one
	# target at a time with a worker per CPU, in a fraction of the time.
	fuzz_jobs=${FUZZ_JOBS:-$(nproc)}
	step "fuzzing (${FUZZTIME:-5s} per target, ${fuzz_jobs} at a time)"
	export -f fuzz_target
	export FUZZTIME FUZZ_WORKERS
	# Every "func FuzzX(" in a _test.go file is a target. xargs runs them
	# and exits non-zero if any failed (set -o pipefail passes that on);
	# each target's output is printed whole once it is done.
	grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
		for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
			printf '%s %s\n' "$(dirname "$f")" "$name"
		done
	done | xargs -P "$fuzz_jobs" -n 2 bash -c 'fuzz_target "$1" "$2"' _ 9>&-
fi

step "all checks passed"
