package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"
)

// Escalate is [mta.escalate]: an address whose SMTP sessions sluice
// refused `after` times within `within` (for its class's cap, the
// reservations, its network's share or the headroom; never an address
// of a class with a reservation) is handed to the escalation helper,
// `sluice escalate-helper`, which runs as root and adds it for `for` to
// an nftables set whose members' connections to `ports` the kernel
// drops. Its reconnects then cost the MTA nothing. The daemon keeps no
// capability; the helper only adds addresses, each for at most max_for,
// to sets of at most `size`, and answers only the daemon's user
// (docs/flood.md, "Escalation"). The helper reads this table from the
// same file.
type Escalate struct {
	// Socket is the helper's unix socket ("": no escalation). Absolute.
	Socket string `toml:"socket"`
	// After is how many refused sessions of one address within Within
	// escalate it: a mail server told 421 waits minutes before it tries
	// again, a bot reconnects at once.
	After int `toml:"after"`
	// Within is the window the refusals are counted in.
	Within Duration `toml:"within"`
	// For is how long the kernel drops an escalated address's
	// connections; sluice counts it again afterwards.
	For Duration `toml:"for"`
	// Ports are the TCP ports the helper's rule drops connections to
	// (the MTA's SMTP listeners).
	Ports []int `toml:"ports"`
	// Size is the most addresses of each family the helper's sets hold;
	// an address past it is refused by sluice as before.
	Size int `toml:"size"`
	// MaxFor caps, in the helper, what one request may ask.
	MaxFor Duration `toml:"max_for"`
	// Table is the nftables table (family inet) the helper makes at its
	// start and deletes at its stop: no other table's rules are touched.
	Table string `toml:"table"`
}

// nftName is a table name nft(8) takes as it is.
var nftName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)

func defaultEscalate() Escalate {
	return Escalate{
		After:  10,
		Within: Duration(time.Minute),
		For:    Duration(10 * time.Minute),
		Ports:  []int{25},
		Size:   65536,
		MaxFor: Duration(time.Hour),
		Table:  "sluice",
	}
}

// validateEscalate checks [mta.escalate].
func (c *Config) validateEscalate() []error {
	e := c.MTA.Escalate
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, c.errAt("mta.escalate."+path, format, args...))
	}
	if e.Socket != "" && !filepath.IsAbs(e.Socket) {
		add("socket", "%q must be an absolute path (the helper and the daemon both read it)", e.Socket)
	}
	if e.After < 2 || e.After > 1000 {
		add("after", "must be between 2 and 1000 (one refusal is any mail server's bad luck)")
	}
	if e.Within.D() < time.Second || e.Within.D() > time.Hour {
		add("within", "must be between 1s and 1h")
	}
	if e.MaxFor.D() < time.Second || e.MaxFor.D() > 24*time.Hour {
		add("max_for", "must be between 1s and 24h")
	}
	if e.For.D() < time.Second || e.For.D() > e.MaxFor.D() {
		add("for", "must be between 1s and max_for (%s)", e.MaxFor.D())
	}
	if len(e.Ports) == 0 || len(e.Ports) > 16 {
		add("ports", "must name 1 to 16 TCP ports")
	}
	for _, p := range e.Ports {
		if p < 1 || p > 65535 {
			add("ports", "%d is not a TCP port", p)
		}
	}
	if !nftName.MatchString(e.Table) {
		add("table", "%q is not a table name: a letter, then up to 31 letters, digits or _", e.Table)
	}
	if e.Size < 1 || e.Size > 1<<20 {
		add("size", "must be between 1 and %s", fmt.Sprint(1<<20))
	}
	return errs
}
