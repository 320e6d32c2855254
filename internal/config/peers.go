package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"strconv"
)

// The per-peer settings every mail door has (max_conns_per_peer,
// allow_users, max_conns_unlisted): loopback is not authentication, since
// any local account can connect to a loopback port, so a door can refuse
// users other than the MTA's, keep one peer from taking all its
// connections, and keep several from taking root's and the listed users'.

// PeerRules are a door's per-peer settings resolved for its server:
// MaxConnsPerPeer and MaxConnsUnlisted with their defaults applied,
// AllowUIDs the uids of allow_users (nil when it is empty: every user).
// Its fields are netserve.PeerLimits's, in the same order.
type PeerRules struct {
	MaxConnsPerPeer  int
	AllowUIDs        []int
	MaxConnsUnlisted int
}

// PeerRules resolves the anvil door's per-peer settings (see peerRules).
func (a Anvil) PeerRules() (PeerRules, error) {
	return peerRules(a.MaxConns, a.MaxConnsPerPeer, a.MaxConnsUnlisted, a.AllowUsers)
}

// PeerRules resolves the policy door's per-peer settings (see peerRules).
func (p Policy) PeerRules() (PeerRules, error) {
	return peerRules(p.MaxConns, p.MaxConnsPerPeer, p.MaxConnsUnlisted, p.AllowUsers)
}

// PeerRules resolves the throttle door's per-peer settings (see
// peerRules).
func (t Throttle) PeerRules() (PeerRules, error) {
	return peerRules(t.MaxConns, t.MaxConnsPerPeer, t.MaxConnsUnlisted, t.AllowUsers)
}

// PeerRules resolves the milter's per-peer settings, its cap a share of
// max_sessions (see peerRules).
func (m Milter) PeerRules() (PeerRules, error) {
	return peerRules(m.MaxSessions, m.MaxConnsPerPeer, m.MaxConnsUnlisted, m.AllowUsers)
}

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

// peerRules resolves a door's settings. Names were checked by Validate; a
// user removed since then is left out of AllowUIDs, which stays non-nil
// (the list fails closed), and is reported in the error.
func peerRules(maxConns int, perPeer, unlisted *int, users []string) (PeerRules, error) {
	r := PeerRules{MaxConnsPerPeer: DefaultPerPeer(maxConns), MaxConnsUnlisted: DefaultUnlisted(maxConns)}
	if perPeer != nil {
		r.MaxConnsPerPeer = *perPeer
	}
	if unlisted != nil {
		r.MaxConnsUnlisted = *unlisted
	}
	if len(users) == 0 {
		return r, nil
	}
	r.AllowUIDs = make([]int, 0, len(users))
	var errs []error
	for _, name := range users {
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

// validatePeers checks a door's max_conns_per_peer, max_conns_unlisted
// and allow_users; door is its table ("milter"), capKey and maxConns its
// connection cap.
func (c *Config) validatePeers(door string, listen []string, capKey string, maxConns int, perPeer, unlisted *int, users []string) []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(door+"."+path, format, args...)) }
	if perPeer != nil && (*perPeer < 0 || maxConns >= 1 && *perPeer > maxConns) {
		add("max_conns_per_peer", "must be between 0 (no per-peer cap) and %s (%d)", capKey, maxConns)
	}
	if unlisted != nil && (*unlisted < 0 || maxConns >= 1 && *unlisted > maxConns) {
		add("max_conns_unlisted", "must be between 0 (no cap) and %s (%d)", capKey, maxConns)
	}
	for i, name := range users {
		if _, err := user.Lookup(name); err != nil {
			add(fmt.Sprintf("allow_users[%d]", i+1), "%q is not a user of this system", name)
		}
	}
	if len(users) == 0 {
		return errs
	}
	for i, l := range listen {
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
