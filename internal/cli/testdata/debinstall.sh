#!/bin/sh
# Run by TestDebianPackage inside `unshare --mount --net --pid --fork`:
# a throwaway root (an overlay of / whose writes go to $1/upper) with
# every trace of sluice removed (a sluice package the host has is purged
# there first: the host's dpkg database, users and files are untouched),
# where the package $2 is installed with dpkg -i, started as its unit
# would start it, asked with `sluice status` and `man`, removed while it
# runs (the prerm stops it; no /run/sluice is left), then purged (no
# file of the removed user's uid is left). Each step prints a line
# "== step".
set -eu
top=$1 deb=$2
m=$top/merged
mkdir -p "$top/upper" "$top/work" "$m"
mount -t overlay overlay -o "lowerdir=/,upperdir=$top/upper,workdir=$top/work" "$m"
mount --rbind /dev "$m/dev"
mount -t proc proc "$m/proc"
mount -t tmpfs -o mode=0755 tmpfs "$m/run"
mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
cp "$deb" "$m/tmp/sluice.deb"
exec chroot "$m" /bin/sh -eu -c '
ip link set lo up
echo "== clean"
if dpkg -s sluice >/dev/null 2>&1; then
	echo "== the host has a sluice package: purged in this root only"
	dpkg --purge sluice
fi
rm -f /usr/local/bin/sluice /usr/local/sbin/sluice
rm -rf /etc/sluice /var/lib/sluice
if getent passwd sluice >/dev/null; then userdel sluice; fi
if getent group sluice >/dev/null; then groupdel sluice; fi
if command -v sluice; then echo "sluice is on the PATH before the install" >&2; exit 1; fi
echo "== dpkg -i"
dpkg -i /tmp/sluice.deb
echo "== installed"
command -v sluice
id sluice
stat -c "%n %U:%G %a" /etc/sluice/sluice.toml /var/lib/sluice
test -f /lib/systemd/system/sluice-escalate.service || { echo "the unit of the escalation helper is not installed" >&2; exit 1; }
dpkg-query -W -f="\${Package} \${Version} \${Status}\n" sluice
echo "== start"
unit=/lib/systemd/system/sluice.service
pre=$(sed -n "s/^ExecStartPre=//p" $unit)
main=$(sed -n "s/^ExecStart=//p" $unit)
asunit="setpriv --reuid=sluice --regid=sluice --init-groups --inh-caps=-all --bounding-set=-all --no-new-privs"
# systemd makes RuntimeDirectory= (owned by User=) before ExecStartPre.
install -d -o sluice -g sluice -m 0755 /run/sluice
install -d -m 0755 /var/spool/postfix/private
$asunit $pre
set --
n=0
for u in sluice.socket sluice-web.socket; do
	for l in $(sed -n "s/^ListenStream=//p" /lib/systemd/system/$u); do
		set -- "$@" -l "$l" --fdname="$u"
		n=$((n + 1))
	done
done
# systemd-socket-activate binds each socket, saying so on its stderr
# (read through a FIFO: no polling), and execs the daemon at the first
# connection, as systemd does. What follows on that FIFO, the daemon
# logs too, is drained to a file.
mkfifo /tmp/activate
systemd-socket-activate "$@" -E LANG=C.UTF-8 -- $asunit $main >/tmp/sluice.log 2>/tmp/activate &
daemon=$!
exec 3</tmp/activate
while [ $n -gt 0 ] && IFS= read -r line <&3; do
	echo "$line" >>/tmp/sluice.log
	case $line in "Listening on "*) n=$((n - 1)) ;; esac
done
cat <&3 >>/tmp/sluice.log 2>&1 &
exec 3<&-
echo "== sluice status"
sluice status -t 20s
echo "== reload"
# systemctl reload: each ExecReload= line as the unit runs it, $MAINPID
# the daemon (systemd-socket-activate became it); then the daemon says
# it reloaded, in its log, drained to the file above.
sed -n "s/^ExecReload=//p" $unit | while IFS= read -r line; do
	$asunit $(echo "$line" | sed "s/\$MAINPID/$daemon/")
done
i=0
until grep -q "configuration reloaded" /tmp/sluice.log; do
	i=$((i + 1))
	if [ $i -gt 600 ]; then echo "the daemon did not reload" >&2; cat /tmp/sluice.log >&2; exit 1; fi
	sleep 0.1
done
echo "reloaded by ExecReload"
echo "== man sluice"
MANPAGER=cat MANWIDTH=80 man sluice | head -n 8
echo "== man sluice.toml"
MANPAGER=cat MANWIDTH=80 man 5 sluice.toml | head -n 8
echo "== remove"
uid=$(id -u sluice)
ls /run/sluice
dpkg --remove sluice
# The prerm stopped the running daemon (systemd-socket-activate became it).
if readlink /proc/$daemon/exe >/dev/null 2>&1; then echo "the daemon outlived the remove" >&2; exit 1; fi
wait $daemon || true
if [ -e /run/sluice ]; then echo "/run/sluice outlived the remove" >&2; exit 1; fi
echo "== purge"
install -d -o sluice -g sluice -m 0755 /run/sluice # as a later start by hand would leave it
dpkg --purge sluice
if getent passwd sluice >/dev/null; then echo "the user sluice outlived the purge" >&2; exit 1; fi
for f in /usr/bin/sluice /etc/sluice /var/lib/sluice /run/sluice /lib/systemd/system/sluice.service /lib/systemd/system/sluice-escalate.service; do
	if [ -e $f ]; then echo "$f outlived the purge" >&2; exit 1; fi
done
left=$(find /etc /run /tmp /var -xdev -uid $uid)
if [ -n "$left" ]; then printf "owned by the purged uid %s:\n%s\n" $uid "$left" >&2; exit 1; fi
echo "no file of uid $uid left"
echo "== log"
cat /tmp/sluice.log
echo "== done"
'
