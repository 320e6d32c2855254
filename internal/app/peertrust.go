package app

import (
	"os"
	"os/user"
	"slices"
	"strconv"

	"sluice/internal/peercred"
)

// peerTrust returns who may steer through a door: root, the user sluice
// runs as, the named users, and the members of the named groups (by the
// peer's group at connect, or its account's supplementary groups). A
// name that cannot be found is warned about and trusts no one; what is
// the name of the door's check in that warning.
func peerTrust(what string, users, groups []string, warn func(string, ...any)) func(peercred.Cred) bool {
	var uids []int
	for _, name := range users {
		u, err := user.Lookup(name)
		if err != nil {
			warn(what+": a trusted user cannot be found; it is not trusted", "user", name, "err", err)
			continue
		}
		if uid, err := strconv.Atoi(u.Uid); err == nil {
			uids = append(uids, uid)
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
	self := os.Geteuid()
	return func(p peercred.Cred) bool {
		if p.UID < 0 {
			return false // not a local peer
		}
		if p.UID == 0 || p.UID == self || slices.Contains(uids, p.UID) {
			return true
		}
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
}
