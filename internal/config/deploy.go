package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Deployment is what CheckSocketDirs knows of how sluice will be started.
type Deployment struct {
	// RunAs is the user that binds the sockets: the service unit's User=
	// when sluice runs from it; "" for the user running the check (run as
	// root, sluice binds as root and switches to the configured user
	// after).
	RunAs string
	// Passed reports whether a socket unit passes the socket at path:
	// sluice does not bind it (nil: none is passed).
	Passed func(path string) bool
	// CanWrite reports whether the service unit's mount namespace lets
	// sluice write in dir (ProtectSystem=, ReadWritePaths=; nil: no unit).
	CanWrite func(dir string) bool
	// Made reports whether systemd makes dir for the service, owned by
	// RunAs (RuntimeDirectory= and the like; nil: no unit).
	Made func(dir string) bool
	// Unit names the service unit in messages.
	Unit string
}

// CheckSocketDirs reports each unix socket sluice would bind itself that
// the start would fail to make: its directory cannot be created, or the
// socket not bound in it, by the user that binds (the permission bits,
// and under a service unit its ProtectSystem= and ReadWritePaths=), or
// its owner or group is one that user cannot give it (only root can give
// a file away). A socket a socket unit passes is systemd's to make. Run by
// that user itself, the kernel's answer (access(2): a read-only mount too)
// is checked as well. Each error names the listen line and the fix.
func (c *Config) CheckSocketDirs(d Deployment) []error {
	p, err := lookupPrincipal(d.RunAs)
	if err != nil {
		return []error{c.errAt("user", "%v", err)}
	}
	var errs []error
	for _, s := range c.UnixSockets() {
		if d.Passed != nil && d.Passed(s.Path) {
			continue
		}
		if err := c.socketDirProblem(s, p, d); err != "" {
			errs = append(errs, c.errAt(s.Key, "%s cannot bind %s: %s; the start would fail. Let a socket unit make it (examples/systemd), or listen in the runtime directory (unix:NAME)", p.what, s.Path, err))
		}
	}
	return errs
}

// socketDirProblem is why p cannot make socket s, or "".
func (c *Config) socketDirProblem(s UnixSocket, p principal, d Deployment) string {
	dir := filepath.Dir(s.Path)
	if d.Made != nil && d.Made(dir) {
		return c.socketOwnerProblem(s, p)
	}
	have := dir
	for {
		if _, err := os.Stat(have); err == nil || !errors.Is(err, fs.ErrNotExist) || have == filepath.Dir(have) {
			break
		}
		have = filepath.Dir(have)
	}
	act := "create a file in " + dir
	if have != dir {
		act = "create the directory " + dir + " in " + have
	}
	if d.CanWrite != nil && !d.CanWrite(have) {
		return fmt.Sprintf("%s makes %s read-only (ProtectSystem=; add ReadWritePaths=), so it cannot %s", d.Unit, have, act)
	}
	if p.uid != 0 {
		uid, gid, mode, ok := c.dirInfo(have, -1, -1)
		if ok && !canWrite(p, uid, gid, mode) {
			return fmt.Sprintf("it cannot %s (owner %s, group %s, mode %04o)", act, userName(uid), groupName(gid), mode)
		}
		if p.uid == os.Geteuid() {
			if err := unix.Access(have, unix.W_OK|unix.X_OK); err != nil {
				return fmt.Sprintf("it cannot %s: %v", act, err)
			}
		}
	}
	if dir, why := c.blockingDir(have, p); dir != "" {
		return fmt.Sprintf("it cannot reach %s (%s)", dir, why)
	}
	return c.socketOwnerProblem(s, p)
}

// socketOwnerProblem is why p cannot give socket s its owner and group, or "".
func (c *Config) socketOwnerProblem(s UnixSocket, p principal) string {
	if p.uid == 0 {
		return ""
	}
	if o := s.Socket.Owner; o != "" {
		if u, err := user.Lookup(o); err == nil && u.Uid != strconv.Itoa(p.uid) {
			return fmt.Sprintf("the socket's owner %s (%s.owner) is another user, and only root can give a file away", o, s.Table)
		}
	}
	if g := s.Socket.Group; g != "" {
		if gr, err := user.LookupGroup(g); err == nil {
			if gid, _ := strconv.Atoi(gr.Gid); !slices.Contains(p.gids, gid) {
				return fmt.Sprintf("the socket's group %s (%s.group) is not one of its groups", g, s.Table)
			}
		}
	}
	return ""
}

// lookupPrincipal is the user name (or, for "", the process itself) as a
// principal.
func lookupPrincipal(name string) (principal, error) {
	if name == "" {
		gids, _ := os.Getgroups()
		what := "uid " + strconv.Itoa(os.Geteuid())
		if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil {
			what = "user " + u.Username
		}
		return principal{what: what, uid: os.Geteuid(), gids: append(gids, os.Getegid())}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return principal{}, fmt.Errorf("no user %q: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return principal{what: "user " + name, uid: uid, gids: userGroups(u)}, nil
}

// canWrite applies the kernel's rule for creating an entry in a
// directory: write and search by the owner's, group's or others' bits.
func canWrite(p principal, uid, gid int, mode fs.FileMode) bool {
	bits := mode & 0o007
	switch {
	case p.uid == uid:
		bits = (mode >> 6) & 0o7
	case slices.Contains(p.gids, gid):
		bits = (mode >> 3) & 0o7
	}
	return bits&0o3 == 0o3
}
