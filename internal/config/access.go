package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// UnixSocket is one unix socket the configuration has sluice bind.
type UnixSocket struct {
	Key    string // the listen entry's key path, e.g. "throttle.listen[1]"
	Table  string // the socket table's key path, e.g. "throttle.socket"
	Path   string // resolved (absolute unless the directories are relative)
	Socket Socket
}

// UnixSockets lists the unix sockets of the enabled doors and the web
// server, with their socket tables.
func (c *Config) UnixSockets() []UnixSocket {
	var out []UnixSocket
	add := func(door string, enabled bool, listen []string, s Socket) {
		if !enabled {
			return
		}
		for i, l := range listen {
			if network, addr, err := ParseListen(l); err == nil && network == "unix" {
				out = append(out, UnixSocket{Key: fmt.Sprintf("%s.listen[%d]", door, i+1), Table: door + ".socket", Path: c.Path(addr), Socket: s})
			}
		}
	}
	add("anvil", c.Anvil.Enabled, c.Anvil.Listen, c.Anvil.Socket)
	add("policy", c.Policy.Enabled, c.Policy.Listen, c.Policy.Socket)
	add("throttle", c.Throttle.Enabled, c.Throttle.Listen, c.Throttle.Socket)
	add("milter", c.Milter.Enabled, c.Milter.Listen, c.Milter.Socket)
	add("web", true, c.Web.Listen, c.Web.Socket)
	return out
}

// principal is who a socket's mode lets in, as the kernel checks a path.
type principal struct {
	what string // "user postfix", "group nogroup", "every user"
	uid  int    // -1 for a group or everyone
	gids []int  // the user's groups, or the group
}

// Directory modes sluice creates its directories with.
const (
	StateDirMode   = 0o750
	RuntimeDirMode = 0o755
)

// CheckAccess reports each unix socket whose configured owner or group
// (the peer the mode lets in) cannot reach it, because a directory above
// it does not let that peer through. Directories that do not exist yet are
// judged as sluice will create them (runtime_dir 0755, state_dir 0750,
// owned by user). A socket passed by systemd is not sluice's to check,
// but its path is the same, so the check holds for it too. Each error
// names the configuration line and the fix.
func (c *Config) CheckAccess() []error {
	var errs []error
	for _, s := range c.UnixSockets() {
		for _, p := range c.socketPrincipals(s.Socket) {
			if dir, why := c.blockingDir(filepath.Dir(s.Path), p); dir != "" {
				field := s.Table + ".group"
				if p.uid >= 0 {
					field = s.Table + ".owner"
				} else if p.what == "every user" {
					field = s.Table + ".mode"
				}
				if c.lines[field] == 0 {
					field = s.Key
				}
				errs = append(errs, c.errAt(field, "%s cannot reach the socket %s: the directory %s (%s) does not let it through; put the socket in a directory it can traverse (runtime_dir, whose default is made mode 0755) or give %s search permission", p.what, s.Path, dir, why, dir))
			}
		}
	}
	return errs
}

// socketPrincipals is who the socket's owner, group and mode let in
// besides sluice itself: the owner if set and its bits allow read and
// write, the group likewise, everyone if the mode's other bits do.
func (c *Config) socketPrincipals(s Socket) []principal {
	mode, err := s.FileMode()
	if err != nil {
		return nil
	}
	var out []principal
	if s.Owner != "" && mode&0o600 == 0o600 {
		if u, err := user.Lookup(s.Owner); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			out = append(out, principal{what: "user " + s.Owner, uid: uid, gids: userGroups(u)})
		}
	}
	if s.Group != "" && mode&0o060 == 0o060 {
		if g, err := user.LookupGroup(s.Group); err == nil {
			gid, _ := strconv.Atoi(g.Gid)
			out = append(out, principal{what: "group " + s.Group, uid: -1, gids: []int{gid}})
		}
	}
	if mode&0o006 == 0o006 {
		out = append(out, principal{what: "every user", uid: -1})
	}
	return out
}

func userGroups(u *user.User) []int {
	var out []int
	ids, _ := u.GroupIds()
	for _, s := range ids {
		if g, err := strconv.Atoi(s); err == nil {
			out = append(out, g)
		}
	}
	if g, err := strconv.Atoi(u.Gid); err == nil {
		out = append(out, g)
	}
	return out
}

// blockingDir walks from dir up to the root and returns the first
// directory p cannot search, with its owner and mode in words.
func (c *Config) blockingDir(dir string, p principal) (string, string) {
	owner, group := c.runAs()
	for d := dir; ; d = filepath.Dir(d) {
		uid, gid, mode, ok := c.dirInfo(d, owner, group)
		if ok && !canSearch(p, uid, gid, mode) {
			return d, fmt.Sprintf("owner %s, group %s, mode %04o", userName(uid), groupName(gid), mode)
		}
		if d == filepath.Dir(d) {
			return "", ""
		}
	}
}

// dirInfo is a directory's owner, group and permission bits: as it is, or
// as sluice will make it if it does not exist yet. ok is false for a
// directory that cannot be read. A missing directory is judged as sluice
// creates it: state_dir 0750, any other (runtime_dir and its parents)
// 0755, owned by the user sluice runs as.
func (c *Config) dirInfo(d string, owner, group int) (uid, gid int, mode fs.FileMode, ok bool) {
	fi, err := os.Stat(d)
	if err == nil {
		st, isUnix := fi.Sys().(*syscall.Stat_t)
		if !isUnix {
			return 0, 0, 0, false
		}
		return int(st.Uid), int(st.Gid), fi.Mode().Perm(), true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, 0, false
	}
	m := fs.FileMode(RuntimeDirMode)
	if filepath.Clean(d) == filepath.Clean(c.StateDir) {
		m = StateDirMode
	}
	return owner, group, m, true
}

// runAs is the user and group sluice will run as: user, else itself.
func (c *Config) runAs() (int, int) {
	if c.User != "" {
		if u, err := user.Lookup(c.User); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			return uid, gid
		}
	}
	return os.Geteuid(), os.Getegid()
}

// canSearch applies the kernel's rule for the search (x) bit: the owner's
// bits for the owner, else the group's bits for a member, else the
// others'. Root passes everything.
func canSearch(p principal, uid, gid int, mode fs.FileMode) bool {
	if p.uid == 0 {
		return true
	}
	if p.uid >= 0 && p.uid == uid {
		return mode&0o100 != 0
	}
	for _, g := range p.gids {
		if g == gid {
			return mode&0o010 != 0
		}
	}
	return mode&0o001 != 0
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}
