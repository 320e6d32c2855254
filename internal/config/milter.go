package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"sluice/internal/rules"
)

// Milter configures the milter service: Postfix smtpd_milters or Sendmail
// INPUT_MAIL_FILTER point at it.
type Milter struct {
	// Enabled serves the milter protocol.
	Enabled bool `toml:"enabled"`
	Door
	// MaxSessions caps open milter connections (one per SMTP session).
	MaxSessions int `toml:"max_sessions"`
	// Workers is how many sessions' rules may run at once.
	Workers int `toml:"workers"`
	// Queue is how many events may wait for a worker (0: none); when it
	// is full the MTA gets the queue_full answer at once.
	Queue int `toml:"queue"`
	// QueueFull is the answer when the queue is full: "tempfail" (the
	// default), "accept" or "reject".
	QueueFull string `toml:"queue_full"`
	// IdleTimeout ends a session whose MTA sends nothing for this long.
	IdleTimeout Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading one packet once its first byte has
	// arrived: an MTA that trickles a packet is cut off.
	RequestTimeout Duration `toml:"request_timeout"`
	// MaxPacket caps one milter packet (bytes).
	MaxPacket int `toml:"max_packet"`
	// RefuseText is the reply when the client's class holds its refuse
	// cap: a "421 4.7.0 ..." line with {class}, {refuse} and {sessions}.
	RefuseText string `toml:"refuse_text"`
	// PauseWhenFull stops accepting milter connections while every class
	// with a refuse cap is full (XLA's listen(0)).
	PauseWhenFull bool `toml:"pause_when_full"`
	// PolicyRules applies [[policy.rule]] at the milter's stages, with
	// policy_context "milter" (for Sendmail, which has no policy service).
	PolicyRules bool `toml:"policy_rules"`
}

func defaultMilter() Milter {
	return Milter{
		Enabled:        true,
		Door:           defaultDoor("milter"),
		MaxSessions:    4096,
		Workers:        16,
		Queue:          1024,
		QueueFull:      "tempfail",
		IdleTimeout:    Duration(10 * time.Minute),
		RequestTimeout: Duration(30 * time.Second),
		MaxPacket:      1 << 20,
		RefuseText:     rules.DefaultMilterRefuse,
	}
}

// smtpReply is "ddd x.y.z text" (4xx or 5xx) with matching classes.
var smtpReply = regexp.MustCompile(`^([45])[0-9][0-9] ([45])\.[0-9]{1,3}\.[0-9]{1,3} \S`)

var refusePlaceholders = []string{"{class}", "{refuse}", "{sessions}"}

func (c *Config) validateMilter() []error {
	m := c.Milter
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt("milter."+path, format, args...)) }
	if !m.Enabled {
		return nil
	}
	errs = append(errs, m.Door.validate(c, "milter", "max_sessions", m.MaxSessions)...)
	if m.Workers < 1 || m.Workers > 4096 {
		add("workers", "must be between 1 and 4096")
	}
	if m.Queue < 0 {
		add("queue", "must not be negative")
	}
	switch m.QueueFull {
	case "tempfail", "accept", "reject":
	default:
		add("queue_full", "%q is not one of tempfail, accept, reject", m.QueueFull)
	}
	if m.IdleTimeout.D() < time.Second {
		add("idle_timeout", "must be at least 1s (an MTA may keep a session open for minutes)")
	}
	if m.RequestTimeout.D() <= 0 {
		add("request_timeout", "must be positive")
	}
	if m.MaxPacket < 65536 || m.MaxPacket > 64<<20 {
		add("max_packet", "must be between 65536 (a body chunk is up to 65535 bytes) and 67108864")
	}
	t := m.RefuseText
	switch {
	case strings.ContainsAny(t, "\r\n\x00"):
		add("refuse_text", "must be one line")
	case !smtpReply.MatchString(t):
		add("refuse_text", "%q is not an SMTP reply such as \"421 4.7.0 text\"", t)
	case t[0] != t[4]:
		add("refuse_text", "%q: the reply code and the enhanced status code disagree", t)
	default:
		for _, p := range placeholder.FindAllString(t, -1) {
			if !slices.Contains(refusePlaceholders, p) {
				add("refuse_text", "unknown placeholder %s (known: %s)", p, strings.Join(refusePlaceholders, " "))
			}
		}
	}
	return errs
}

// CapDoors says which doors enforce the classes' refuse caps, and warns
// when a Postfix SMTP session that two doors see would hold two slots:
// sluice finds the session across anvil and the milter by smtpd's process
// id, which only a unix socket carries (SO_PEERCRED).
func (c *Config) CapDoors() (text, warning string) {
	anvil := c.Anvil.Enabled && c.Anvil.ClassCaps
	switch {
	case anvil && c.Milter.Enabled:
		text = "anvil (at connect) and the milter (at CONNECT); a Postfix session both see holds one slot, found by smtpd's process id"
	case anvil:
		text = "anvil (at connect)"
	case c.Milter.Enabled:
		text = "the milter (at CONNECT)"
		if c.Anvil.Enabled {
			text += "; anvil keeps only its counts and rates (anvil.class_caps = false)"
		}
	default:
		return "none (neither anvil nor the milter is on)", ""
	}
	if !anvil || !c.Milter.Enabled {
		return text, ""
	}
	for _, l := range append(slices.Clone(c.Milter.Listen), c.Anvil.Listen...) {
		if network, _, err := ParseListen(l); err == nil && network != "unix" {
			return text, fmt.Sprintf("%s is not a unix socket: sluice cannot learn which smtpd process a connection on it comes from, so a Postfix session that both anvil and the milter see would hold two slots of its class (a class of 2 would admit 1). Listen on unix sockets for both doors, or set anvil.class_caps = false so that the milter alone enforces the class caps (anvil keeps its counts and rates)", l)
		}
	}
	return text, ""
}
