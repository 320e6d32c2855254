package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"strconv"
	"strings"
)

// Door holds the settings every mail door (anvil, policy, throttle,
// milter) has, as keys of the door's own table: where it listens, its
// socket file, and who may hold its connections. Loopback is not
// authentication, since any local account can connect to a loopback
// port, so a door can refuse users other than the MTA's, keep one peer
// from taking all its connections, and keep several from taking root's
// and the listed users'. The door's cap is its max_conns (the milter's
// max_sessions).
type Door struct {
	// Listen lists "unix:PATH" (relative paths under runtime_dir) and
	// "inet:HOST:PORT" addresses.
	Listen []string `toml:"listen"`
	Socket Socket   `toml:"socket"`
	// MaxConnsPerPeer caps the open connections of one peer: a local user
	// (its uid) on a unix socket or a loopback address, where every local
	// account can connect, else a host (its IP address). Beyond it that
	// peer's new connections are closed while other peers still get in.
	// Absent: half of the door's cap (max_conns; the milter's
	// max_sessions), rounded up, so that no one user or host can take the
	// whole door from the MTA; 0: no per-peer cap.
	MaxConnsPerPeer *int `toml:"max_conns_per_peer"`
	// MaxConnsUnlisted caps the connections that the peers other than
	// root, sluice's user and allow_users hold together: every other local
	// user, every host off loopback, every peer whose uid cannot be
	// learnt. Beyond it their new connections are closed, and the listed
	// keep the rest of the door's cap, however many local accounts
	// connect (under their max_conns_per_peer, two of them could otherwise
	// fill the door). Absent: half of the door's cap, rounded down; 0: no
	// such cap. The MTA's user (postfix) is listed only by allow_users,
	// which then refuses every unlisted peer anyway. A door serving other
	// hosts gives them this share: raise it (up to the cap) if they need
	// more.
	MaxConnsUnlisted *int `toml:"max_conns_unlisted"`
	// AllowUsers names the only local users whose connections are served
	// (e.g. ["postfix"]); any other's are closed at once, with a log line
	// naming its uid. It applies to unix sockets too (on top of their
	// mode) and needs inet listeners on loopback (127.0.0.1, ::1): a peer
	// on another host has no uid here. Empty: every user let in, and
	// sluice check warns of an inet listener on loopback, where the MTA's
	// user is then unlisted and one other local user at its
	// max_conns_per_peer fills max_conns_unlisted.
	AllowUsers []string `toml:"allow_users"`
}

// defaultDoor is a door's defaults: a unix socket of its name under
// runtime_dir, mode 0660.
func defaultDoor(name string) Door {
	return Door{Listen: []string{"unix:" + name}, Socket: Socket{Mode: "0660"}}
}

// PeerRules are a door's per-peer settings resolved for its server:
// MaxConnsPerPeer and MaxConnsUnlisted with their defaults applied,
// AllowUIDs the uids of allow_users (nil when it is empty: every user).
// Its fields are netserve.PeerLimits's, in the same order.
type PeerRules struct {
	MaxConnsPerPeer  int
	AllowUIDs        []int
	MaxConnsUnlisted int
}

// PeerRules resolves the anvil door's per-peer settings (see Door.Peers).
func (a Anvil) PeerRules() (PeerRules, error) { return a.Peers(a.MaxConns) }

// PeerRules resolves the policy door's per-peer settings (see Door.Peers).
func (p Policy) PeerRules() (PeerRules, error) { return p.Peers(p.MaxConns) }

// PeerRules resolves the throttle door's per-peer settings (see
// Door.Peers).
func (t Throttle) PeerRules() (PeerRules, error) { return t.Peers(t.MaxConns) }

// PeerRules resolves the milter's per-peer settings, its cap a share of
// max_sessions (see Door.Peers).
func (m Milter) PeerRules() (PeerRules, error) { return m.Peers(m.MaxSessions) }

// DefaultPerPeer is max_conns_per_peer when absent: half of the door's
// cap, rounded up. One peer (a local user, or a host) can then never take
// the whole door, whatever it opens: the other half stays for the rest,
// and the MTA's own user is one peer among them. Half of the default
// 4096 is still far above the connections a Postfix host opens to one
// door (one per smtpd or cleanup process; default_process_limit is 100).
func DefaultPerPeer(maxConns int) int { return (maxConns + 1) / 2 }

// DefaultUnlisted is max_conns_unlisted when absent: half of the door's
// cap, rounded down. However many local accounts open connections (each
// under its own per-peer cap), root, sluice's user and the users of
// allow_users keep the other half.
func DefaultUnlisted(maxConns int) int { return maxConns / 2 }

// Peers resolves the door's per-peer settings for its cap maxConns.
// Names were checked by Validate; a user removed since then is left out
// of AllowUIDs, which stays non-nil (the list fails closed), and is
// reported in the error.
func (d Door) Peers(maxConns int) (PeerRules, error) {
	r := PeerRules{MaxConnsPerPeer: DefaultPerPeer(maxConns), MaxConnsUnlisted: DefaultUnlisted(maxConns)}
	if d.MaxConnsPerPeer != nil {
		r.MaxConnsPerPeer = *d.MaxConnsPerPeer
	}
	if d.MaxConnsUnlisted != nil {
		r.MaxConnsUnlisted = *d.MaxConnsUnlisted
	}
	if len(d.AllowUsers) == 0 {
		return r, nil
	}
	r.AllowUIDs = make([]int, 0, len(d.AllowUsers))
	var errs []error
	for _, name := range d.AllowUsers {
		uid, err := lookupUID(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.AllowUIDs = append(r.AllowUIDs, uid)
	}
	return r, errors.Join(errs...)
}

func lookupUID(name string) (int, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return -1, fmt.Errorf("allow_users: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return -1, fmt.Errorf("allow_users: user %s has uid %q", name, u.Uid)
	}
	return uid, nil
}

// validate checks the door's settings; door is its table ("milter"),
// capKey and maxConns its connection cap, checked here too.
func (d Door) validate(c *Config, door, capKey string, maxConns int) []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(door+"."+path, format, args...)) }
	if len(d.Listen) == 0 {
		add("listen", "the %s service is enabled but has no listen address", door)
	}
	for i, l := range d.Listen {
		if _, _, err := ParseListen(l); err != nil {
			add(fmt.Sprintf("listen[%d]", i+1), "%v", err)
		}
	}
	if field, err := d.Socket.check(); err != nil {
		add("socket."+field, "%v", err)
	}
	if maxConns < 1 {
		add(capKey, "must be at least 1")
	}
	if d.MaxConnsPerPeer != nil && (*d.MaxConnsPerPeer < 0 || maxConns >= 1 && *d.MaxConnsPerPeer > maxConns) {
		add("max_conns_per_peer", "must be between 0 (no per-peer cap) and %s (%d)", capKey, maxConns)
	}
	if d.MaxConnsUnlisted != nil && (*d.MaxConnsUnlisted < 0 || maxConns >= 1 && *d.MaxConnsUnlisted > maxConns) {
		add("max_conns_unlisted", "must be between 0 (no cap) and %s (%d)", capKey, maxConns)
	}
	for i, name := range d.AllowUsers {
		if _, err := user.Lookup(name); err != nil {
			add(fmt.Sprintf("allow_users[%d]", i+1), "%q is not a user of this system", name)
		}
	}
	if len(d.AllowUsers) == 0 {
		return errs
	}
	for i, l := range d.Listen {
		network, addr, err := ParseListen(l)
		if err != nil || network != "tcp" {
			continue
		}
		if host, _, _ := net.SplitHostPort(addr); !loopbackHost(host) {
			add("allow_users", "%s.listen[%d] %q is not on loopback: peers on other hosts can connect to it, and they have no uid here to check; bind it to 127.0.0.1 or ::1, serve the door on a unix socket, or drop allow_users and let a firewall choose the hosts", door, i+1, l)
		}
	}
	return errs
}

// loopbackHost reports whether an inet listen host binds loopback only:
// "localhost", or a loopback address (127.0.0.0/8, ::1).
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// DoorWarnings are the mail doors (anvil, policy, throttle, milter) on
// TCP over loopback without allow_users. Any local account can connect
// there, and the MTA's user, unless it is root or sluice's user, is one
// of the unlisted peers sharing max_conns_unlisted: a local user at its
// max_conns_per_peer (by default both are half of the door's cap) fills
// that share alone, and the MTA's new connections are closed.
func (c *Config) DoorWarnings() []string {
	doors := []struct {
		name, capKey string
		on           bool
		door         Door
		max          int
	}{
		{"anvil", "max_conns", c.Anvil.Enabled, c.Anvil.Door, c.Anvil.MaxConns},
		{"policy", "max_conns", c.Policy.Enabled, c.Policy.Door, c.Policy.MaxConns},
		{"throttle", "max_conns", c.Throttle.Enabled, c.Throttle.Door, c.Throttle.MaxConns},
		{"milter", "max_sessions", c.Milter.Enabled, c.Milter.Door, c.Milter.MaxSessions},
	}
	var out []string
	for _, d := range doors {
		if !d.on || len(d.door.AllowUsers) > 0 {
			continue
		}
		var inet []string
		for _, l := range d.door.Listen {
			network, addr, err := ParseListen(l)
			if host, _, _ := net.SplitHostPort(addr); err == nil && network == "tcp" && loopbackHost(host) {
				inet = append(inet, l)
			}
		}
		if len(inet) == 0 {
			continue
		}
		r, _ := d.door.Peers(d.max)
		share, size := fmt.Sprintf("max_conns_unlisted (%d)", r.MaxConnsUnlisted), r.MaxConnsUnlisted
		if size == 0 {
			share, size = fmt.Sprintf("the whole door (%s %d, as max_conns_unlisted = 0)", d.capKey, d.max), d.max
		}
		fill := fmt.Sprintf("one other local user at its max_conns_per_peer (%d) fills it", r.MaxConnsPerPeer)
		switch {
		case r.MaxConnsPerPeer == 0:
			fill = "one other local user fills it (max_conns_per_peer = 0: no cap per user)"
		case r.MaxConnsPerPeer < size:
			fill = fmt.Sprintf("%d other local users, each at its max_conns_per_peer (%d), fill it", (size+r.MaxConnsPerPeer-1)/r.MaxConnsPerPeer, r.MaxConnsPerPeer)
		}
		out = append(out, fmt.Sprintf("%s listens on TCP over loopback (%s) without allow_users: every local account can connect to it, and the MTA's user (postfix; unless it is root or sluice's user) is unlisted, sharing %s with every other account: %s, and the MTA's new connections are closed; set %s.allow_users to the MTA's user and root ([\"postfix\", \"root\"]), or serve the door on a unix socket (docs/operations.md, \"Loopback is not authentication\")",
			d.name, strings.Join(inet, ", "), share, fill, d.name))
	}
	return out
}
