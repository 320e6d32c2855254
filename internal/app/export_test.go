package app

import (
	"net"

	"sluice/internal/governor"
)

// Addrs returns the bound listener addresses.
func (d *Daemon) Addrs() []net.Addr {
	var out []net.Addr
	for _, bl := range d.listeners {
		out = append(out, bl.l.Addr())
	}
	return out
}

// Governor returns the rules in force.
func (d *Daemon) Governor() *governor.Governor { return d.gov.Load() }
