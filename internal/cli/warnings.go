package cli

import (
	"context"
	"os"
	"os/user"
	"path/filepath"

	"sluice/internal/config"
	"sluice/internal/postconf"
	"sluice/internal/sdlisten"
)

// rootPhase reports whether this serve is the root phase, which binds the
// sockets and execs itself as cfg.User (app.ExecUnprivileged): the
// configuration is read again, and warned of, after the exec.
func rootPhase(cfg *config.Config) bool {
	if _, handed := os.LookupEnv(sdlisten.HandoffVar); handed || os.Geteuid() != 0 || cfg.User == "" {
		return false
	}
	u, err := user.Lookup(cfg.User)
	return err == nil && u.Uid != "0"
}

// configWarnings are what check and serve warn of in a configuration that
// loads: who else can steer sluice through its store (a readable
// password, a Redis without one; config.StoreWarnings), throttle reports
// nobody but root and sluice may send (config.ReportWarning), a session two
// doors would count twice, a door on loopback TCP any local user can fill
// (config.DoorWarnings), classes and throttle policies an earlier one
// hides (config.OrderWarnings), and [anvil.smtpd] limits that differ from
// Postfix's main.cf in postfixDir (a directory or its main.cf; "" for
// anvil.postfix_config_dir; not compared when both are empty or anvil is
// off).
func configWarnings(ctx context.Context, path string, cfg *config.Config, postfixDir string) []string {
	out := config.StoreWarnings(path, cfg)
	if _, w := cfg.CapDoors(); w != "" {
		out = append(out, w)
	}
	if w := cfg.ReportWarning(); w != "" {
		out = append(out, w)
	}
	out = append(out, cfg.DoorWarnings()...)
	out = append(out, cfg.OrderWarnings()...)
	if postfixDir == "" {
		postfixDir = cfg.Anvil.PostfixConfigDir
	}
	if !cfg.Anvil.Enabled || postfixDir == "" {
		return out
	}
	if filepath.Base(postfixDir) == "main.cf" {
		postfixDir = filepath.Dir(postfixDir)
	}
	drift, err := postconf.Drift(ctx, cfg, postfixDir)
	if err != nil {
		return append(out, "cannot compare [anvil.smtpd] with Postfix's main.cf: "+err.Error())
	}
	return append(out, drift...)
}
