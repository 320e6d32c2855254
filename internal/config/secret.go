package config

import (
	"fmt"
	"os"
)

// SecretWarning returns a warning when the configuration file at path
// holds a password (store.redis.password or sentinel_password written in
// the file) and every user of the host may read the file; "" otherwise.
// A password belongs in a file only sluice's user reads (password_file),
// or in a configuration file of mode 0640 or stricter.
func SecretWarning(path string, c *Config) string {
	if path == "" || (c.Store.Redis.Password == "" && c.Store.Redis.SentinelPassword == "") {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return ""
	}
	return fmt.Sprintf("%s holds a Redis password and every user may read it (mode %04o): chmod o-r it, or move the password to password_file", path, fi.Mode().Perm())
}
