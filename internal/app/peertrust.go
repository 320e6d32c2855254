package app

import (
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"

	"sluice/internal/peercred"
)

// trustList is who may steer through a door: root, the user sluice runs
// as, the named users, and the members of the named groups (by the
// group the peer connected with, or its account's groups).
type trustList struct {
	self int
	uids []int
	gids atomic.Pointer[[]string]
}

// peerTrust returns the trust list of the named users and groups. A
// name that cannot be found is warned about and trusts no one; what is
// the name of the door's check in that warning.
func peerTrust(what string, users, groups []string, warn func(string, ...any)) *trustList {
	l := &trustList{self: os.Geteuid()}
	for _, name := range users {
		u, err := user.Lookup(name)
		if err != nil {
			warn(what+": a trusted user cannot be found; it is not trusted", "user", name, "err", err)
			continue
		}
		if uid, err := strconv.Atoi(u.Uid); err == nil {
			l.uids = append(l.uids, uid)
		}
	}
	var gids []string
	for _, name := range groups {
		g, err := user.LookupGroup(name)
		if err != nil {
			warn(what+": a trusted group cannot be found; its members are not trusted", "group", name, "err", err)
			continue
		}
		gids = append(gids, g.Gid)
	}
	l.gids.Store(&gids)
	return l
}

// addSocketGroup trusts the group of l's socket file too (a unix
// listener on a path: the one sluice bound, or systemd's), and returns
// it ("" for none).
func (l *trustList) addSocketGroup(ln net.Listener) string {
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		return ""
	}
	path := ul.Addr().String()
	if path == "" || path[0] == '@' {
		return "" // an abstract socket has no file
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	gid := strconv.FormatUint(uint64(st.Gid), 10)
	for {
		old := l.gids.Load()
		if slices.Contains(*old, gid) {
			return gid
		}
		gids := append(slices.Clip(*old), gid)
		if l.gids.CompareAndSwap(old, &gids) {
			return gid
		}
	}
}

// trusts says whether the peer p is on the list.
func (l *trustList) trusts(p peercred.Cred) bool {
	if p.UID < 0 {
		return false // not a local peer
	}
	if p.UID == 0 || p.UID == l.self || slices.Contains(l.uids, p.UID) {
		return true
	}
	gids := *l.gids.Load()
	if len(gids) == 0 {
		return false
	}
	if p.GID >= 0 && slices.Contains(gids, strconv.Itoa(p.GID)) {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(p.UID))
	if err != nil {
		return false
	}
	mine, err := u.GroupIds()
	if err != nil {
		return false
	}
	for _, g := range mine {
		if slices.Contains(gids, g) {
			return true
		}
	}
	return false
}
