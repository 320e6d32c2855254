package config

import (
	"os/user"
	"strings"
	"time"
)

// Control configures the administrator's control socket (`sluice key`,
// `sluice explain`, `sluice exempt`, `sluice throttle suspend` ...): a
// unix socket only, owned by sluice's user with the admin group, mode
// 0660. Root, sluice's user and members of admin_group may give commands;
// each leaves a log line naming the peer's uid and pid.
type Control struct {
	// Enabled turns the control socket on.
	Enabled bool `toml:"enabled"`
	// Socket is the socket's path, relative to runtime_dir unless
	// absolute. It is never a TCP address.
	Socket string `toml:"socket"`
	// AdminGroup is the group that owns the socket, whose members may give
	// commands; empty: only root and sluice's user.
	AdminGroup string `toml:"admin_group"`
	// MaxConns caps open connections to the socket.
	MaxConns int `toml:"max_conns"`
	// IdleTimeout closes a connection idle between commands this long.
	IdleTimeout Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading one command once it began.
	RequestTimeout Duration `toml:"request_timeout"`
	// MaxLine bounds one command's line, in bytes.
	MaxLine int `toml:"max_line"`
}

// ControlSocketMode is the control socket's mode: owner and group only.
const ControlSocketMode = 0o660

func defaultControl() Control {
	return Control{Enabled: true, Socket: "control", MaxConns: 16, IdleTimeout: Duration(5 * time.Minute),
		RequestTimeout: Duration(10 * time.Second), MaxLine: 64 << 10}
}

// ControlSocket returns the socket's path (relative paths under
// runtime_dir).
func (c *Config) ControlSocket() string { return c.Path(c.Control.Socket) }

func (c *Config) validateControl() []error {
	k := c.Control
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt("control."+path, format, args...)) }
	if k.Socket == "" || strings.HasPrefix(k.Socket, "inet:") || strings.HasPrefix(k.Socket, "unix:") || strings.Contains(k.Socket, ":") && !strings.HasPrefix(k.Socket, "/") {
		add("socket", "%q: a path of a unix socket (never a TCP address, no \"unix:\")", k.Socket)
	}
	if k.AdminGroup != "" {
		if _, err := user.LookupGroup(k.AdminGroup); err != nil {
			add("admin_group", "no such group %q", k.AdminGroup)
		}
	}
	if k.MaxConns < 1 || k.MaxConns > 1024 {
		add("max_conns", "must be between 1 and 1024")
	}
	if k.IdleTimeout.D() < time.Second {
		add("idle_timeout", "must be at least 1s")
	}
	if k.RequestTimeout.D() < time.Second {
		add("request_timeout", "must be at least 1s")
	}
	if k.MaxLine < 1024 || k.MaxLine > 1<<20 {
		add("max_line", "must be between 1024 and %d", 1<<20)
	}
	return errs
}
