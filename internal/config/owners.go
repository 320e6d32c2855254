package config

import (
	"os/user"
	"strconv"

	"sluice/internal/safefs"
)

// CheckFileOwners judges, when sluice runs as root, the files the
// configuration names that the daemon reads later rather than as it is
// loaded: the Redis password files and CA file, read once a root start
// has become the configured user (or by root itself without one). Each
// must belong to root (or to that user) and be writable by nobody else,
// as must every directory on its path (safefs.CheckTrusted); each error
// names the key, the file, its owner and its mode. The files Load reads
// (this file, include_dir's, classes_file, the rules' tables) were
// judged as they were read. Not root, nothing is judged.
func (c *Config) CheckFileOwners() []error {
	r := c.Store.Redis
	if c.Store.Kind != "redis" {
		return nil
	}
	files := []struct{ key, path string }{
		{"store.redis.password_file", r.PasswordFile},
		{"store.redis.sentinel_password_file", r.SentinelPasswordFile},
	}
	if r.TLS {
		files = append(files, struct{ key, path string }{"store.redis.tls_ca_file", r.TLSCAFile})
	}
	also := c.daemonUID()
	var errs []error
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if err := safefs.CheckTrusted(c.Relative(f.path), also); err != nil {
			errs = append(errs, c.errAt(f.key, "%v", err))
		}
	}
	return errs
}

// daemonUID is the uid a root start runs the daemon as (user), or -1
// when it keeps root.
func (c *Config) daemonUID() int {
	if c.User == "" {
		return -1
	}
	u, err := user.Lookup(c.User)
	if err != nil {
		return -1 // the start refuses the unknown user
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil || uid == 0 {
		return -1
	}
	return uid
}
