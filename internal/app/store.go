package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/limiter"
	"sluice/internal/safefs"
	"sluice/internal/store/memory"
	"sluice/internal/store/redis"
)

// maxSecretFile caps a password or CA file: far above a password or a
// bundle of CA certificates, far below what could hurt. Like every file
// sluice reads, it must be a regular file (safefs).
const maxSecretFile = 1 << 20

// openStore builds the configured store and says whether decisions it
// cannot make are admitted (fail open).
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (limiter.Store, bool, error) {
	if cfg.Store.Kind != "redis" {
		return memory.New(memory.Options{
			MaxKeys: cfg.Limiter.MaxKeys,
			Logger:  log,
		}), cfg.Limiter.WhenFull != "fail-closed", nil
	}
	r := cfg.Store.Redis
	o := redis.Options{
		Addrs:     r.Addrs,
		Username:  r.Username,
		Password:  r.Password,
		DB:        r.DB,
		Cluster:   r.Cluster,
		MasterSet: r.MasterSet,
		// The Sentinels' credentials; their password may come from a file.
		SentinelUsername: r.SentinelUsername,
		SentinelPassword: r.SentinelPassword,
		KeyPrefix:        r.KeyPrefix,
		Deadline:         r.Deadline.D(),
		DialTimeout:      r.DialTimeout.D(),
		LeaseTTL:         r.LeaseTTL.D(),
		WaitReplicas:     r.WaitReplicas,
		WaitTimeout:      r.WaitTimeout.D(),
		Logger:           log,
	}
	if r.PasswordFile != "" {
		b, err := safefs.ReadTrusted(cfg.Relative(r.PasswordFile), maxSecretFile)
		if err != nil {
			return nil, false, fmt.Errorf("redis password file: %w", err)
		}
		o.Password = strings.TrimSpace(string(b))
	}
	if r.SentinelPasswordFile != "" {
		b, err := safefs.ReadTrusted(cfg.Relative(r.SentinelPasswordFile), maxSecretFile)
		if err != nil {
			return nil, false, fmt.Errorf("redis sentinel password file: %w", err)
		}
		o.SentinelPassword = strings.TrimSpace(string(b))
	}
	if r.TLS {
		tc := &tls.Config{ServerName: r.TLSServerName, MinVersion: tls.VersionTLS12}
		if r.TLSCAFile != "" {
			pem, err := safefs.ReadTrusted(cfg.Relative(r.TLSCAFile), maxSecretFile)
			if err != nil {
				return nil, false, fmt.Errorf("redis CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, false, fmt.Errorf("redis CA file %s: no certificate found", r.TLSCAFile)
			}
		}
		o.TLS = tc
	}
	ctx, cancel := context.WithTimeout(ctx, r.DialTimeout.D()+5*time.Second)
	defer cancel()
	s, err := redis.New(ctx, o)
	if err != nil {
		return nil, false, fmt.Errorf("redis store %s: %w", strings.Join(r.Addrs, ","), err)
	}
	log.Info("limits are shared through Redis", "addrs", strings.Join(r.Addrs, ","), "master_set", r.MasterSet, "cluster", r.Cluster, "prefix", r.KeyPrefix, "deadline", r.Deadline.D().String(), "fail_mode", r.FailMode, "wait_replicas", r.WaitReplicas)
	return s, r.FailMode == "open", nil
}
