package config

import (
	"fmt"
	"os/user"
	"strings"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/rules"
)

// Throttle configures the outbound throttle service.
type Throttle struct {
	// Enabled serves the throttle protocol (sluice throttle, the qmail-remote
	// wrapper).
	Enabled bool `toml:"enabled"`
	Door
	// MaxConns caps open client connections.
	MaxConns int `toml:"max_conns"`
	// ReportUsers are the local users whose send results (a REPORT) may
	// suspend a key or change its learned limit, besides root, the user
	// sluice runs as and report_groups. A report from anyone else, or from
	// a TCP peer off loopback, changes nothing for the key's other senders
	// (docs/throttle.md).
	ReportUsers []string `toml:"report_users"`
	// ReportGroups are the groups whose members' send results may steer a
	// key, as report_users (by the group the peer connected with, or its
	// account's groups). Absent: the throttle socket's group, the
	// wrapper's (socket.group, and the group of each unix socket the door
	// serves, systemd's SocketGroup= too); empty: none.
	ReportGroups []string `toml:"report_groups"`
	// RequestTimeout bounds reading one request once it has started.
	RequestTimeout Duration         `toml:"request_timeout"`
	Policies       []ThrottlePolicy `toml:"policy"`
}

// ThrottlePolicy is one [[throttle.policy]].
type ThrottlePolicy struct {
	// Name names the policy in logs and replies; it must be unique.
	Name string `toml:"name"`
	// Match lists host masks the key is matched against. The first
	// policy with a matching mask wins: sluice check warns of a mask an
	// earlier policy's mask covers, since it never matches.
	Match []string `toml:"match"`
	// Limit is "N/PERIOD": at most N sends in any window of PERIOD.
	Limit string `toml:"limit"`
	// Concurrency caps sends in flight at once for a key (0: no cap).
	Concurrency int64 `toml:"concurrency"`
	// MaxWait is the longest a sender is told to wait; beyond it the send is
	// deferred (absent or 0: one hour).
	MaxWait Duration `toml:"max_wait"`
	// Margin is added to the period to absorb clock and network skew with the
	// relay (default 250ms).
	Margin *Duration `toml:"margin"`
	// Shared makes every key the policy matches share one budget (one
	// limit and one concurrency cap for all of them, as for a smarthost
	// every destination goes through); false gives each key its own.
	Shared bool `toml:"shared"`
	// BanSigns are texts in the relay's answers that mean it has cut the
	// sender off (matched ignoring case, e.g. "too many", "rate limit"), or
	// reply codes matched as words ("554", "5.7.1"). A send's permanent
	// failure that matches one suspends the key and is reported to qmail as
	// temporary (docs/throttle.md).
	BanSigns []string `toml:"ban_signs"`
	// BanAfter counts that many consecutive failed sends (the relay took
	// nothing, for no recipient's own reason) as a ban even without a sign
	// (0: off).
	BanAfter int `toml:"ban_after"`
	// CoolOff is how long a ban suspends the key (default 5m); it doubles
	// for each ban that follows within MaxCoolOff of the last one's end.
	CoolOff Duration `toml:"cool_off"`
	// MaxCoolOff caps the growing cool-off (default 1h).
	MaxCoolOff Duration `toml:"max_cool_off"`
	// Adapt learns the relay's limit: a ban or a throttling answer (a
	// temporary failure matching a ban sign) halves the limit the key had,
	// at most, and each AdaptWindow of clean sends raises it by an eighth
	// of limit (at least one), never above it: back within eight windows.
	Adapt bool `toml:"adapt"`
	// AdaptWindow is how long sends must go clean before the learned limit
	// rises (default ten periods of limit).
	AdaptWindow Duration `toml:"adapt_window"`
	// Corroborate is how many distinct sends must show a sign of a ban
	// (a ban sign, ban_after failures, a throttling answer) within
	// CorroborateWindow before the key is suspended or its learned limit
	// lowered (default 2; 1: one send decides). A send's own failure is
	// reported as temporary without it.
	Corroborate int `toml:"corroborate"`
	// CorroborateWindow is how close together those sends must be
	// (default the longer of cool_off and two periods of limit).
	CorroborateWindow Duration `toml:"corroborate_window"`
}

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
	errs = append(errs, t.Door.validate(c, "throttle", "max_conns", t.MaxConns)...)
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

// ReportWarning warns when a throttle policy reads send results (ban
// signs, ban_after, adapt) but no report_users or report_groups is
// configured and the socket has no group of its own configured: the
// wrapper's reports are then trusted only if it runs as root or sluice,
// or systemd's socket unit (SocketGroup=) gives the socket its group;
// otherwise they change nothing and the ban protection is off in effect.
// "" when there is nothing to say.
func (c *Config) ReportWarning() string {
	t := c.Throttle
	if !t.Enabled {
		return ""
	}
	if users, groups := t.Reporters(); len(users) > 0 || len(groups) > 0 || t.ReportGroups != nil {
		return ""
	}
	specs, _ := c.ThrottlePolicies()
	for _, s := range specs {
		if s.Ban.On() {
			return fmt.Sprintf("throttle.policy %q reads send results, but only root, sluice's user and the group of the socket file (sluice's own, unless systemd's SocketGroup= sets another) may report them: a wrapper running as another user (qmailr) changes nothing; set [throttle.socket] group or throttle.report_groups to the wrapper's group (qmail), or throttle.report_users", s.Name)
		}
	}
	return ""
}
