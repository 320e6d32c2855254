package app

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"sluice/internal/config"
	"sluice/internal/privdrop"
)

// account resolves the configured user: nil when sluice keeps the user it
// was started as. Started as another user than root, it must already be
// that user, since only root can switch.
func account(cfg *config.Config) (*privdrop.Account, error) {
	if cfg.User == "" {
		return nil, nil
	}
	a, err := privdrop.Lookup(cfg.User)
	if err != nil {
		return nil, fmt.Errorf("user: %w", err)
	}
	if os.Geteuid() != 0 && !a.Current() {
		return nil, fmt.Errorf("user = %q, but sluice was started as uid %d and only root can switch users: start it as root or as %s (under systemd: User=%s)", cfg.User, os.Geteuid(), cfg.User, cfg.User)
	}
	return &a, nil
}

// prepareDirs creates the state directory (0750) and the socket directory
// (0755: each socket carries its own owner, group and mode) and, when
// sluice will switch to acct, gives both to it so that it can write state
// and remove its sockets after the switch.
func prepareDirs(cfg *config.Config, acct *privdrop.Account) error {
	if err := mkdir(cfg.StateDir, config.StateDirMode, acct); err != nil {
		return fmt.Errorf("state directory %s: %w (choose another with -state-dir or state_dir; for a user other than root the default is $XDG_STATE_HOME/sluice)", cfg.StateDir, err)
	}
	if dir := cfg.SocketDir(); dir != cfg.StateDir {
		if err := mkdir(dir, config.RuntimeDirMode, acct); err != nil {
			return fmt.Errorf("runtime directory %s: %w (choose another with runtime_dir; for a user other than root the default is $XDG_RUNTIME_DIR/sluice)", dir, err)
		}
	}
	return nil
}

// mkdir makes dir with mode if it is missing (a directory that exists
// keeps its mode: systemd's StateDirectory= or an administrator chose it)
// and hands it to acct.
func mkdir(dir string, mode fs.FileMode, acct *privdrop.Account) error {
	_, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, mode); err != nil {
			return err
		}
		// MkdirAll's mode is filtered by the umask.
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if acct != nil && os.Geteuid() == 0 {
		if err := os.Chown(dir, acct.UID, acct.GID); err != nil {
			return fmt.Errorf("give it to %s: %w", acct.Name, err)
		}
	}
	return nil
}

// dropPrivileges switches to acct once every socket is bound, and warns
// when a root-started daemon has no user to switch to.
func dropPrivileges(acct *privdrop.Account, log *slog.Logger) error {
	if acct == nil {
		if os.Geteuid() == 0 {
			log.Warn("running as root: set user = \"sluice\" (adduser --system --group sluice) so that sluice gives root up once its sockets are bound")
		}
		return nil
	}
	if err := acct.Drop(); err != nil {
		return fmt.Errorf("switch to user %s: %w", acct.Name, err)
	}
	log.Info("running as an unprivileged user", "user", acct.Name, "uid", acct.UID, "gid", acct.GID)
	return nil
}
