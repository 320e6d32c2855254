#!/usr/bin/env bash
# Builds sluice's Debian package from this checkout with dpkg-deb:
#
#   scripts/deb.sh [OUTDIR]        writes OUTDIR/sluice_VERSION_ARCH.deb (default .)
#
# and prints its path. It holds
#   /usr/bin/sluice                   go build of ./cmd/sluice (the revision Go embeds)
#   /usr/share/man/man8/sluice.8.gz, man5/sluice.toml.5.gz   from packaging/man
#   /lib/systemd/system/              examples/systemd's sluice.service, sluice.socket,
#                                     sluice-web.socket and sluice-escalate.service (the
#                                     escalation helper), with the binary at /usr/bin and those
#                                     socket units at /lib/systemd/system (neither enabled nor
#                                     started: the administrator decides, sluice(8))
#   /etc/sluice/sluice.toml           examples/sluice.toml, a conffile
#   /usr/share/doc/sluice/            README.md, docs/, examples/: sluice-milter.socket and
#                                     sluice-throttle.socket among them, which docs/operations.md
#                                     installs in /etc/systemd/system only with the milter on, or
#                                     on a qmail host (its group qmail), as the service's
#                                     ExecStartPre= still expects them
# and packaging/debian's postinst (makes the system user sluice with
# adduser), prerm and postrm. SLUICE_BINARY=PATH packages that binary
# instead of building one; VERSION=... sets the version (default
# 0~gitDATE.REV from the checkout's last commit, +dirty if it has changes).
# DEB_COMPRESS=gzip, none: dpkg-deb -Z (default xz; none is for tests).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)
arch=$(dpkg --print-architecture)
if [ -z "${VERSION:-}" ]; then
	VERSION=0~git$(git -C "$root" log -1 --format=%cd.%h --date=format:%Y%m%d%H%M%S)
	if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
		VERSION+=+dirty
	fi
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg
install -d -m 0755 "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man8" "$pkg/usr/share/man/man5" \
	"$pkg/lib/systemd/system" "$pkg/etc/sluice" "$pkg/usr/share/doc/sluice"

if [ -n "${SLUICE_BINARY:-}" ]; then
	install -m 0755 "$SLUICE_BINARY" "$pkg/usr/bin/sluice"
else
	(cd "$root" && go build -buildvcs=true -o "$pkg/usr/bin/sluice" ./cmd/sluice)
fi

gzip -9n <"$root/packaging/man/sluice.8" >"$pkg/usr/share/man/man8/sluice.8.gz"
gzip -9n <"$root/packaging/man/sluice.toml.5" >"$pkg/usr/share/man/man5/sluice.toml.5.gz"

for u in sluice.service sluice.socket sluice-web.socket sluice-escalate.service; do
	sed -e 's|/usr/local/bin/sluice|/usr/bin/sluice|g' \
		-e 's|-socket-unit /etc/systemd/system/sluice\.socket|-socket-unit /lib/systemd/system/sluice.socket|' \
		-e 's|-socket-unit /etc/systemd/system/sluice-web\.socket|-socket-unit /lib/systemd/system/sluice-web.socket|' \
		-e 's|^# sluice: mail traffic governor. Install as /etc/systemd/system/|# sluice: mail traffic governor. (Debian package: /lib/systemd/system/)\n# Install by hand as /etc/systemd/system/|' \
		"$root/examples/systemd/$u" >"$pkg/lib/systemd/system/$u"
	chmod 0644 "$pkg/lib/systemd/system/$u"
done
if grep -q /usr/local/ "$pkg/lib/systemd/system/"*; then
	echo "deb.sh: a unit still names /usr/local:" >&2
	grep -n /usr/local/ "$pkg/lib/systemd/system/"* >&2
	exit 1
fi

install -m 0640 "$root/examples/sluice.toml" "$pkg/etc/sluice/sluice.toml"
echo /etc/sluice/sluice.toml >"$pkg/DEBIAN/conffiles"

cp -r "$root/README.md" "$root/docs" "$root/examples" "$pkg/usr/share/doc/sluice/"
find "$pkg/usr/share/doc" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +

for s in postinst prerm postrm; do
	install -m 0755 "$root/packaging/debian/$s" "$pkg/DEBIAN/$s"
done
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" \
	"$root/packaging/debian/control.in" >"$pkg/DEBIAN/control"

deb=$out/sluice_${VERSION}_$arch.deb
dpkg-deb --root-owner-group -Z"${DEB_COMPRESS:-xz}" --build "$pkg" "$deb" >/dev/null
echo "$deb"
