package config

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// StoreWarnings are the warnings about who else can steer sluice through
// its store, for `sluice check` and `sluice serve` at start (a
// configuration that draws them is still valid):
//
//   - the configuration file at path holds a password
//     (store.redis.password or sentinel_password written in the file) and
//     every user of the host may read it;
//   - a password_file or sentinel_password_file other users may read:
//     anyone but root and the user sluice runs as (see passwordFileWarning);
//   - the Redis store is reached over TCP without a password: whoever
//     reaches the port can write sluice's keys (suspend outbound mail,
//     exempt senders, change learned limits and counts).
func StoreWarnings(path string, c *Config) []string {
	var out []string
	r := c.Store.Redis
	if path != "" && (r.Password != "" || r.SentinelPassword != "") {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o004 != 0 {
			out = append(out, fmt.Sprintf("%s holds a Redis password and every user may read it (mode %04o): chmod o-r it, or move the password to password_file", path, fi.Mode().Perm()))
		}
	}
	if c.Store.Kind != "redis" {
		return out
	}
	for _, f := range [][2]string{{"password_file", r.PasswordFile}, {"sentinel_password_file", r.SentinelPasswordFile}} {
		if f[1] != "" {
			if w := c.passwordFileWarning(f[0], c.Relative(f[1])); w != "" {
				out = append(out, w)
			}
		}
	}
	if r.Password == "" && r.PasswordFile == "" {
		var tcp []string
		for _, a := range r.Addrs {
			if _, unix := RedisUnixPath(a); !unix {
				tcp = append(tcp, a)
			}
		}
		if len(tcp) > 0 {
			out = append(out, fmt.Sprintf("store.redis: Redis at %s is reached over TCP without a password: any local user (or host) that can reach it steers sluice (suspends all outbound mail, exempts senders, changes learned limits and counts); give sluice an ACL user limited to key_prefix (username, password_file) or use a unix socket (docs/redis.md)", strings.Join(tcp, ", ")))
		}
	}
	return out
}

// passwordFileWarning warns of a password file (store.redis.key at
// file) that users other than root and sluice's may read: readable by
// others, or by a group that is not sluice's own. sluice's group is the
// group of the user it runs as (user, or the user running this); when
// that is root without user (`sluice check` run by root for a daemon
// systemd starts as sluice), the group of the system user sluice (the
// package's, as in the recipe root:sluice 0640) passes.
func (c *Config) passwordFileWarning(key, file string) string {
	fi, err := os.Stat(file)
	if err != nil {
		return "" // an error of the configuration, reported as one
	}
	mode := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || mode&0o044 == 0 {
		return ""
	}
	gid := int(st.Gid)
	if mode&0o004 == 0 {
		uid, daemonGID := c.runAs()
		if gid == daemonGID || (uid == 0 && c.User == "" && sluiceGroup(gid)) {
			return ""
		}
	}
	who := "every user"
	if mode&0o004 == 0 {
		who = "group " + groupName(gid)
	}
	return fmt.Sprintf("store.redis.%s: %s may read %s (owner %s, group %s, mode %04o), and with the password steer sluice through Redis: chmod 0640 it with sluice's group (root:sluice), or 0600 for sluice's user", key, who, file, userName(int(st.Uid)), groupName(gid), mode)
}

// sluiceGroup reports whether gid is the primary group of the system
// user sluice (the user the package makes and its unit runs as).
func sluiceGroup(gid int) bool {
	u, err := user.Lookup("sluice")
	return err == nil && u.Gid == strconv.Itoa(gid)
}
