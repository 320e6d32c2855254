package config

import "fmt"

// validateReserve checks one class's reservation.
func (c *Config) validateReserve(path string, cl Class) []error {
	switch {
	case cl.Reserve < 0:
		return []error{c.errAt(path+".reserve", "must not be negative")}
	case cl.Refuse > 0 && cl.Reserve > cl.Refuse:
		return []error{c.errAt(path+".reserve", "%d is more than the class's refuse cap (%d): the class could never use its reservation; lower reserve or raise refuse", cl.Reserve, cl.Refuse)}
	}
	return nil
}

// Reserved returns the sum of the [[class]] reservations.
func (c *Config) Reserved() int64 {
	var n int64
	for _, cl := range c.Classes {
		n += max(cl.Reserve, 0)
	}
	return n
}

// validateMTA checks [mta] and the reservations against it. A capacity
// read from the MTA is checked when it is read (check, the start).
func (c *Config) validateMTA() []error {
	var errs []error
	if c.MTA.Sessions < 0 {
		errs = append(errs, c.errAt("mta.sessions", "must not be negative (0: read the capacity from the MTA)"))
	}
	reserved := c.Reserved()
	if n := c.MTA.Sessions; n > 0 && reserved >= n {
		errs = append(errs, c.errAt("mta.sessions", "the classes reserve %d of the MTA's %d sessions: leave at least one for the other classes (lower the reserves or raise sessions)", reserved, n))
	}
	if reserved > 0 && c.Anvil.Enabled && c.Anvil.ClassCaps {
		if cc := c.Anvil.SMTPD.ConnectionCount; cc != nil && *cc == 0 {
			for i, cl := range c.Classes {
				if cl.Reserve > 0 {
					errs = append(errs, c.errAt(fmt.Sprintf("class[%d].reserve", i+1), "smtpd refuses through anvil only while smtpd_client_connection_count_limit > 0; set anvil.smtpd.client_connection_count_limit"))
				}
			}
		}
	}
	return errs
}
