package config

import (
	"fmt"
	"os/user"
	"strings"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/rules"
)

// DefaultMargin is added to a throttle period when none is configured.
const DefaultMargin = 250 * time.Millisecond

// ThrottlePolicySpec is a throttle policy with every field parsed: each
// field is named after the [[throttle.policy]] key it comes from
// (MaxWait from max_wait; docs/config.md gives their meaning).
type ThrottlePolicySpec struct {
	Name        string
	Match       []hostmask.Mask
	Limit       rules.Limit
	Concurrency int64
	MaxWait     time.Duration
	Margin      time.Duration
	Shared      bool
	Ban         BanSpec
}

// BanSpec is what a policy does when the relay bans anyway (ban_signs,
// ban_after, cool_off, max_cool_off, adapt, adapt_window).
type BanSpec struct {
	Signs             []string
	After             int
	CoolOff           time.Duration
	MaxCoolOff        time.Duration
	Adapt             bool
	AdaptWindow       time.Duration
	Corroborate       int
	CorroborateWindow time.Duration
}

// On says whether the policy reads send results at all.
func (b BanSpec) On() bool { return len(b.Signs) > 0 || b.After > 0 || b.Adapt }

// Defaults of a ban's cool-off.
const (
	DefaultCoolOff    = 5 * time.Minute
	DefaultMaxCoolOff = time.Hour
	// DefaultCorroborate is how many distinct sends must show a sign of
	// a ban before it suspends a key or lowers its limit.
	DefaultCorroborate = 2
	// MaxCorroborate bounds corroborate (each is a mark per key).
	MaxCorroborate = 16
	maxBanSign     = 200
)

// ThrottlePolicies parses and checks the [[throttle.policy]] tables.
func (c *Config) ThrottlePolicies() ([]ThrottlePolicySpec, []error) {
	var out []ThrottlePolicySpec
	var errs []error
	seen := map[string]bool{}
	for i, p := range c.Throttle.Policies {
		path := fmt.Sprintf("throttle.policy[%d]", i+1)
		add := func(field, format string, args ...any) {
			errs = append(errs, c.errAt(path+"."+field, format, args...))
		}
		spec := ThrottlePolicySpec{Name: p.Name, Concurrency: p.Concurrency, MaxWait: p.MaxWait.D(), Margin: DefaultMargin, Shared: p.Shared}
		switch {
		case p.Name == "":
			add("name", "every policy needs a name")
		case seen[p.Name]:
			add("name", "policy %q defined twice", p.Name)
		}
		seen[p.Name] = true
		if len(p.Match) == 0 {
			add("match", "a policy needs host masks for its keys (\"*\" for every key)")
		}
		for j, m := range p.Match {
			mask, err := hostmask.Parse(m)
			if err != nil {
				add(fmt.Sprintf("match[%d]", j+1), "%v", err)
				continue
			}
			spec.Match = append(spec.Match, mask)
		}
		l, err := rules.ParseLimit(p.Limit)
		switch {
		case p.Limit == "":
			add("limit", "a policy needs a limit, e.g. \"8/10s\"")
		case err != nil:
			add("limit", "%v", err)
		case l.Algorithm != rules.Exact:
			add("limit", "throttle limits are exact (a relay that cuts you off counts every message); drop %q", l.Algorithm)
		}
		spec.Limit = l
		if p.Concurrency < 0 {
			add("concurrency", "must not be negative (0: no cap)")
		}
		if spec.MaxWait <= 0 {
			spec.MaxWait = time.Hour
			if p.MaxWait.D() < 0 {
				add("max_wait", "must be positive")
			}
		}
		if p.Margin != nil {
			spec.Margin = p.Margin.D()
			if spec.Margin < 0 || spec.Margin > time.Minute {
				add("margin", "must be between 0 and 1m")
			}
		}
		spec.Ban = c.banSpec(p, spec.Limit.Period+spec.Margin, add)
		out = append(out, spec)
	}
	return out, errs
}

func (c *Config) banSpec(p ThrottlePolicy, period time.Duration, add func(field, format string, args ...any)) BanSpec {
	b := BanSpec{Signs: p.BanSigns, After: p.BanAfter, CoolOff: p.CoolOff.D(), MaxCoolOff: p.MaxCoolOff.D(), Adapt: p.Adapt, AdaptWindow: p.AdaptWindow.D(),
		Corroborate: p.Corroborate, CorroborateWindow: p.CorroborateWindow.D()}
	for j, sign := range p.BanSigns {
		field := fmt.Sprintf("ban_signs[%d]", j+1)
		switch {
		case strings.TrimSpace(sign) == "":
			add(field, "a ban sign must not be empty (it would match every answer)")
		case len(sign) > maxBanSign:
			add(field, "a ban sign is at most %d bytes", maxBanSign)
		case strings.IndexFunc(sign, func(r rune) bool { return r < ' ' || r > '~' }) >= 0:
			add(field, "a ban sign is printable ASCII (qmail-remote prints nothing else)")
		}
	}
	if b.After < 0 {
		add("ban_after", "must not be negative (0: off)")
	}
	if b.CoolOff == 0 {
		b.CoolOff = DefaultCoolOff
	}
	if b.MaxCoolOff == 0 {
		b.MaxCoolOff = max(DefaultMaxCoolOff, b.CoolOff)
	}
	switch {
	case b.CoolOff < 0 || b.MaxCoolOff < 0:
		add("cool_off", "must be positive")
	case b.MaxCoolOff < b.CoolOff:
		add("max_cool_off", "%s is shorter than cool_off (%s)", b.MaxCoolOff, b.CoolOff)
	}
	if b.AdaptWindow == 0 {
		b.AdaptWindow = 10 * period
	}
	switch {
	case b.AdaptWindow < 0:
		add("adapt_window", "must be positive")
	case p.AdaptWindow != 0 && !p.Adapt:
		add("adapt_window", "set, but adapt is off")
	case p.Adapt && b.AdaptWindow < period:
		add("adapt_window", "%s is shorter than the limit's period with its margin (%s): a window of clean sends needs a whole period", b.AdaptWindow, period)
	}
	switch {
	case b.Corroborate == 0:
		b.Corroborate = DefaultCorroborate
	case b.Corroborate < 0 || b.Corroborate > MaxCorroborate:
		add("corroborate", "must be between 1 and %d (1: one send's result decides for every sender of the key)", MaxCorroborate)
	}
	if b.CorroborateWindow == 0 {
		b.CorroborateWindow = max(b.CoolOff, 2*period)
	}
	if b.CorroborateWindow < 0 {
		add("corroborate_window", "must be positive")
	}
	return b
}

func (c *Config) validateThrottle() []error {
	t := c.Throttle
	_, errs := c.ThrottlePolicies()
	if !t.Enabled {
		return errs
	}
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	if len(t.Listen) == 0 {
		add("throttle.listen", "the throttle service is enabled but has no listen address")
	}
	for i, l := range t.Listen {
		if _, _, err := ParseListen(l); err != nil {
			add(fmt.Sprintf("throttle.listen[%d]", i+1), "%v", err)
		}
	}
	if field, err := t.Socket.check(); err != nil {
		add("throttle.socket."+field, "%v", err)
	}
	if t.MaxConns < 1 {
		add("throttle.max_conns", "must be at least 1")
	}
	errs = append(errs, c.validatePeers("throttle", t.Listen, "max_conns", t.MaxConns, t.MaxConnsPerPeer, t.MaxConnsUnlisted, t.AllowUsers)...)
	for i, name := range t.ReportUsers {
		if _, err := user.Lookup(name); err != nil {
			add(fmt.Sprintf("throttle.report_users[%d]", i+1), "%q is not a user of this system", name)
		}
	}
	for i, name := range t.ReportGroups {
		if _, err := user.LookupGroup(name); err != nil {
			add(fmt.Sprintf("throttle.report_groups[%d]", i+1), "%q is not a group of this system", name)
		}
	}
	if t.RequestTimeout.D() <= 0 {
		add("throttle.request_timeout", "must be positive")
	}
	return errs
}

// Reporters are the users and groups whose send results may change a
// key's ban state or learned limit, besides root and sluice's own user:
// report_users, and report_groups or, when it is absent, the throttle
// socket's group as configured (the daemon adds the group each unix
// socket it serves has, systemd's SocketGroup= too).
func (t Throttle) Reporters() (users, groups []string) {
	groups = t.ReportGroups
	if groups == nil && t.Socket.Group != "" {
		groups = []string{t.Socket.Group}
	}
	return t.ReportUsers, groups
}
