package config

import "strings"

// validateMasterSet checks [store.redis] master_set: a Sentinel master set
// name (Sentinel's own rule: no spaces, as its replies are split on them)
// that is not combined with a Cluster, which fails over by itself.
func (c *Config) validateMasterSet() []error {
	r := c.Store.Redis
	if r.MasterSet == "" {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, c.errAt("store.redis.master_set", format, args...))
	}
	if strings.ContainsAny(r.MasterSet, " \t\r\n\"'") {
		add("%q is not a Sentinel master set name (no spaces or quotes)", r.MasterSet)
	}
	if r.Cluster {
		add("set master_set (Redis Sentinel) or cluster = true (Redis Cluster), not both: a Cluster fails over by itself")
	}
	return errs
}
