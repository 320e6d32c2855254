package app

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"sluice/internal/config"
	"sluice/internal/privdrop"
	"sluice/internal/safefs"
	"sluice/internal/sdlisten"
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
// and remove its sockets after the switch: a directory made now, or
// sluice's own default one (config.DefaultStateDir, DefaultRuntimeDir),
// never another that existed before (see mkdir).
func prepareDirs(cfg *config.Config, acct *privdrop.Account) error {
	if err := mkdir(cfg.StateDir, config.StateDirMode, acct, config.DefaultStateDir()); err != nil {
		return fmt.Errorf("state directory %s: %w (choose another with -state-dir or state_dir; for a user other than root the default is $XDG_STATE_HOME/sluice)", cfg.StateDir, err)
	}
	if dir := cfg.SocketDir(); dir != cfg.StateDir {
		if err := mkdir(dir, config.RuntimeDirMode, acct, config.DefaultRuntimeDir()); err != nil {
			return fmt.Errorf("runtime directory %s: %w (choose another with runtime_dir; for a user other than root the default is $XDG_RUNTIME_DIR/sluice)", dir, err)
		}
	}
	return nil
}

// mkdir makes dir with mode if it is missing (a directory that exists
// keeps its mode: systemd's StateDirectory= or an administrator chose it)
// and, as root, hands it to acct: through its descriptor, reached
// without following a link another user could plant (safefs). Only a
// directory made now, or sluice's own default directory def, is handed
// over: any other that existed is the administrator's (/srv, /var/spool,
// a user's home: a state_dir naming one must not make root give it
// away), used as it is, and refused when acct cannot write in it.
func mkdir(dir string, mode fs.FileMode, acct *privdrop.Account, def string) error {
	d, created, err := safefs.MkdirAll(dir, mode)
	if err != nil {
		return err
	}
	defer d.Close()
	if acct == nil || os.Geteuid() != 0 {
		return nil
	}
	isDefault := filepath.Clean(dir) == filepath.Clean(def) || d.Path() == filepath.Clean(def)
	if !created && !isDefault {
		return usable(d, acct)
	}
	if err := d.Chown(acct.UID, acct.GID); err != nil {
		return fmt.Errorf("give it to %s: %w", acct.Name, err)
	}
	return nil
}

// usable refuses the existing directory d unless acct can make and remove
// entries in it (write and search permission, by the kernel's rule for
// owner, group and others).
func usable(d *safefs.Dir, acct *privdrop.Account) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(d.Fd(), &st); err != nil {
		return fmt.Errorf("%s: %w", d.Path(), err)
	}
	bits := st.Mode & 0o7 // others'
	switch {
	case int(st.Uid) == acct.UID:
		bits = st.Mode >> 6 & 0o7
	case int(st.Gid) == acct.GID || slices.Contains(acct.Groups, int(st.Gid)):
		bits = st.Mode >> 3 & 0o7
	}
	if bits&0o3 == 0o3 {
		return nil
	}
	return fmt.Errorf("it exists (owner uid %d, group gid %d, mode %04o) and user %s cannot write in it; sluice gives only a directory it makes, or its own default one, to its user: give %s to %s yourself (chown %s %s), or name a directory that does not exist yet",
		st.Uid, st.Gid, st.Mode&0o7777, acct.Name, d.Path(), acct.Name, acct.Name, d.Path())
}

// warnRoot warns when a daemon started as root has no user to switch to.
func warnRoot(acct *privdrop.Account, log *slog.Logger) {
	if acct == nil && os.Geteuid() == 0 {
		log.Warn("running as root: set user = \"sluice\" (adduser --system --group sluice) so that sluice gives root up once its sockets are bound")
	}
}

// ExecUnprivileged is the root phase of a daemon started as root with
// user = NAME (docs/security.md, "Privilege phases"). It makes the state
// and runtime directories and gives them to NAME, gives NAME the state
// files an earlier run left as root, binds every listener (or takes the
// one systemd passed), and then execs sluice again (argv, the same
// binary, by descriptor) as NAME with an empty capability bounding set
// and no_new_privs, the sockets passed across the exec (sdlisten.
// HandoffVar). The new process, unprivileged from its first instruction,
// does everything else: it reads the state files, connects to Redis and
// serves. With nothing to give up (not root, no user, or user root) it
// returns nil at once; otherwise it returns only on failure, and the
// caller must then exit. When stop ends first, it returns its error
// instead of the exec.
func ExecUnprivileged(stop context.Context, cfg *config.Config, argv []string, systemd *sdlisten.Sockets, log *slog.Logger) error {
	acct, err := account(cfg)
	if err != nil || acct == nil || os.Geteuid() != 0 || acct.Current() {
		return err
	}
	if acct.UID == 0 {
		return nil
	}
	if err := prepareDirs(cfg, acct); err != nil {
		return err
	}
	handOverState(cfg, acct, log)
	d := &Daemon{log: log, src: sources{systemd: systemd}, runAs: acct}
	for _, fe := range d.frontEnds(cfg) {
		if fe.on {
			if err := d.listenAll(cfg, fe.name, fe.listen, fe.socket, nil); err != nil {
				d.closeListeners()
				return err
			}
		}
	}
	if err := d.dropUnnamed(); err != nil {
		d.closeListeners()
		return err
	}
	exe, err := privdrop.OpenSelf()
	if err != nil {
		d.closeListeners()
		return err
	}
	files, env, err := handoffFiles(d.listeners)
	if err != nil {
		d.closeListeners()
		return err
	}
	log.Info("root phase done: sockets bound; running on as an unprivileged user with no capability",
		"user", acct.Name, "uid", acct.UID, "gid", acct.GID, "sockets", len(files))
	if err := stop.Err(); err != nil {
		d.closeListeners()
		return err
	}
	err = privdrop.Exec(*acct, exe, argv, env, files)
	return fmt.Errorf("switch to user %s: %w", acct.Name, err)
}

// handoffFiles returns a descriptor of each listener and the environment
// that names them for the process after the exec.
func handoffFiles(ls []boundListener) ([]*os.File, []string, error) {
	type filer interface{ File() (*os.File, error) }
	var files []*os.File
	var fds []int
	var fromSystemd []bool
	for _, bl := range ls {
		fl, ok := bl.l.(filer)
		if !ok {
			return nil, nil, fmt.Errorf("%s: listener %s has no descriptor to pass", bl.door, bl.spec)
		}
		f, err := fl.File()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: listener %s: %w", bl.door, bl.spec, err)
		}
		files = append(files, f)
		fds = append(fds, int(f.Fd()))
		fromSystemd = append(fromSystemd, bl.fromSystemd)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, sdlisten.HandoffVar+"=") })
	env = append(env, sdlisten.HandoffVar+"="+sdlisten.EncodeHandoff(fds, fromSystemd))
	return files, env, nil
}

// handOverState gives acct the snapshot and booking journal an earlier
// run of sluice left owned by root (sluice versions before the root
// phase wrote the journal as root), so that the daemon can read them as
// acct. Only a regular file with one link owned by root is handed over;
// anything else is left for the reader to refuse.
func handOverState(cfg *config.Config, acct *privdrop.Account, log *slog.Logger) {
	sc := cfg.Store.Snapshot
	if cfg.Store.Kind != "memory" || !sc.Enabled {
		return
	}
	path := cfg.StatePath(sc.File)
	dir, err := safefs.OpenDir(filepath.Dir(path))
	if err != nil {
		log.Error("store snapshot: cannot open its directory", "err", err)
		return
	}
	defer dir.Close()
	for _, name := range []string{filepath.Base(path), filepath.Base(path) + ".bookings"} {
		moved, err := dir.HandOver(name, acct.UID, acct.GID)
		if err != nil {
			log.Error("store snapshot: cannot give a file left by root to the daemon's user", "file", dir.Join(name), "user", acct.Name, "err", err)
		} else if moved {
			log.Info("store snapshot: a file left by root given to the daemon's user", "file", dir.Join(name), "user", acct.Name)
		}
	}
}

// unclaimedError is the error for sockets systemd passed that no listen
// address names: their clients would wait on them for ever.
func unclaimedError(left []string) error {
	return fmt.Errorf("systemd passed sockets that no listen address in the configuration names: %s (name them in a listen list, or remove them from the socket unit)", strings.Join(left, ", "))
}
