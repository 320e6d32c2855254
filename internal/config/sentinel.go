package config

import (
	"os"
	"strings"
)

// validateMasterSet checks [store.redis] master_set, a Sentinel master set
// name (Sentinel's own rule: no spaces, as its replies are split on them)
// that is not combined with a Cluster, which fails over by itself, and the
// keys that authenticate to the Sentinels, which need it.
func (c *Config) validateMasterSet() []error {
	r := c.Store.Redis
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, c.errAt("store.redis."+key, format, args...))
	}
	if r.MasterSet == "" {
		for _, kv := range [][2]string{{"sentinel_username", r.SentinelUsername}, {"sentinel_password", r.SentinelPassword}, {"sentinel_password_file", r.SentinelPasswordFile}} {
			if kv[1] != "" {
				add(kv[0], "is for the Sentinels: set master_set too")
			}
		}
		return errs
	}
	if strings.ContainsAny(r.MasterSet, " \t\r\n\"'") {
		add("master_set", "%q is not a Sentinel master set name (no spaces or quotes)", r.MasterSet)
	}
	if r.Cluster {
		add("master_set", "set master_set (Redis Sentinel) or cluster = true (Redis Cluster), not both: a Cluster fails over by itself")
	}
	if r.SentinelPassword != "" && r.SentinelPasswordFile != "" {
		add("sentinel_password_file", "set sentinel_password or sentinel_password_file, not both")
	}
	if r.SentinelPasswordFile != "" {
		if _, err := os.Stat(c.Relative(r.SentinelPasswordFile)); err != nil {
			add("sentinel_password_file", "%v", err)
		}
	}
	return errs
}
