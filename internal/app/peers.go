package app

import (
	"sluice/internal/config"
	"sluice/internal/netserve"
)

// peerLimits is a door's per-peer rules (max_conns_per_peer, allow_users)
// for its server, resolved by rules (config.Anvil.PeerRules, ...). A user
// of allow_users removed since the configuration was checked is logged;
// the list stays closed to it.
func (d *Daemon) peerLimits(door string, rules func() (config.PeerRules, error)) netserve.PeerLimits {
	r, err := rules()
	if err != nil {
		d.log.Error(door+": a user named in allow_users is gone; connections are refused to it", "err", err)
	}
	return netserve.PeerLimits(r)
}
