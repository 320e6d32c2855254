package config

import (
	"path/filepath"
	"strings"
)

// RedisUnixPath returns the socket path of a store.redis.addrs entry of
// the form "unix:PATH", and whether it is one.
func RedisUnixPath(addr string) (string, bool) {
	return strings.CutPrefix(addr, "unix:")
}

// unixAddrProblem says what is wrong with a unix socket address in
// [store.redis], or "": the path is absolute, and the socket is the one
// server sluice uses (a Cluster's nodes and the master a Sentinel names
// are announced as host:port, and Redis serves TLS on TCP only).
func (r Redis) unixAddrProblem(path string) string {
	switch {
	case path == "" || !filepath.IsAbs(path):
		return "a unix socket needs an absolute path (unix:/run/redis/redis-server.sock)"
	case len(r.Addrs) > 1:
		return "a unix socket is one Redis server: name it alone"
	case r.Cluster:
		return "a Redis Cluster is reached over TCP (its nodes announce host:port)"
	case r.MasterSet != "":
		return "the Sentinels are reached over TCP (they announce the master as host:port)"
	case r.TLS:
		return "Redis serves TLS over TCP only: set tls = false for a unix socket"
	}
	return ""
}
