package app

import (
	"errors"
	"log/slog"
	"slices"

	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/postconf"
)

// The converters from a validated configuration to the governor's rules,
// one per rule type; serve (buildGovernor) and check (the Text functions)
// both go through them, and none drops an error.

// buildGovernor turns the configuration into rules, with the capacity
// [mta] sessions sets (the daemon reads the MTA's: newGovernor).
func buildGovernor(cfg *config.Config, lim *limiter.Limiter, waiters *limiter.Waiters, refusals *governor.RefusalLog, carried *governor.AnvilCarried, exempt *governor.Exemptions, pairs *governor.SessionPairs, obs governor.Observer, log *slog.Logger) (*governor.Governor, error) {
	return newGovernor(cfg, governor.Capacity(postconf.Configured(cfg)), governor.Options{Limiter: lim, Waiters: waiters, Refusals: refusals,
		Carried: carried, Exemptions: exempt, Pairs: pairs, Observer: obs, Logger: log})
}

// capacity finds the MTA's capacity for a start or a reload, and logs
// what it found: a reservation without a capacity, or one that does not
// leave a session to the other classes, is worth a warning.
func (d *Daemon) capacity(cfg *config.Config, log *slog.Logger) governor.Capacity {
	pc, err := postconf.MTACapacity(d.stop, cfg)
	c := governor.Capacity(pc)
	reserved := cfg.Reserved()
	switch {
	case err != nil:
		log.Warn("cannot read the MTA's session capacity; reservations are not enforced (set [mta] sessions)", "err", err, "reserved", reserved)
	case c.Sessions == 0 && reserved > 0:
		log.Warn("the classes reserve sessions but the MTA's capacity is unknown; reservations are not enforced (set [mta] sessions, mta.sendmail_cf or anvil.postfix_config_dir)", "reserved", reserved)
	case c.Sessions > 0:
		log.Info("MTA session capacity", "sessions", c.Sessions, "from", c.From, "reserved", reserved)
		if reserved >= c.Sessions {
			log.Warn("the classes reserve all of the MTA's sessions or more: the other classes get none", "sessions", c.Sessions, "reserved", reserved)
		}
	}
	return c
}

// newGovernor turns the configuration into rules over the MTA's capacity;
// keep holds what outlives reloads (the limiter, the queues, the open
// sessions' tables, the observer and the logger), which it fills in.
func newGovernor(cfg *config.Config, capacity governor.Capacity, keep governor.Options) (*governor.Governor, error) {
	table, rules, err := classRules(cfg)
	if err != nil {
		return nil, err
	}
	prules, errs := PolicyRules(cfg)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	trules, errs := ThrottleRules(cfg)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	keep.Classes, keep.Anvil, keep.Policy, keep.Throttle, keep.Capacity = table, rules, prules, trules, capacity
	keep.Milter = governor.MilterRules{RefuseText: cfg.Milter.RefuseText, PolicyRules: cfg.Milter.PolicyRules}
	return governor.New(keep), nil
}

func anvilLimits(l config.SMTPDLimits) governor.AnvilLimits {
	var out governor.AnvilLimits
	v := l.Values()
	out.Count = deref(v[0])
	for i := range len(v) - 1 {
		out.Rates[i] = deref(v[i+1])
	}
	return out
}

func classLimits(l config.SMTPDLimits) governor.ClassLimits {
	var out governor.ClassLimits
	v := l.Values()
	out.Count = v[0]
	for i := range len(v) - 1 {
		out.Rates[i] = v[i+1]
	}
	return out
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// classRules converts the class table and the anvil limits.
func classRules(cfg *config.Config) (*limiter.Classes, governor.AnvilRules, error) {
	rules := governor.AnvilRules{
		Unit:        cfg.Anvil.RateTimeUnit.D(),
		Postfix:     anvilLimits(cfg.Anvil.SMTPD),
		Classes:     map[string]governor.ClassLimits{},
		NoClassCaps: !cfg.Anvil.ClassCaps,
	}
	specs, errs := cfg.ClassTable()
	if len(errs) > 0 {
		return nil, rules, errors.Join(errs...)
	}
	classes := make([]limiter.Class, len(specs))
	for i, s := range specs {
		classes[i] = limiter.Class{Name: s.Name, Masks: s.Masks, Refuse: s.Refuse, Queue: s.Queue, Reserve: s.Reserve}
		if v := s.Anvil.Values(); slices.ContainsFunc(v[:], func(p *int64) bool { return p != nil }) {
			rules.Classes[s.Name] = classLimits(s.Anvil)
		}
	}
	table, err := limiter.NewClasses(classes)
	if err != nil {
		return nil, rules, err
	}
	return table, rules, nil
}

// ClassTableText is the class table as check prints it.
func ClassTableText(cfg *config.Config) (string, error) {
	table, _, err := classRules(cfg)
	if err != nil {
		return "", err
	}
	return table.Table(), nil
}

// PolicyRulesText is the policy rules as check prints them.
func PolicyRulesText(cfg *config.Config) (string, error) {
	rules, errs := PolicyRules(cfg)
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return rules.Table(), nil
}

// ThrottleRulesText is the throttle policies as check prints them.
func ThrottleRulesText(cfg *config.Config) (string, error) {
	rules, errs := ThrottleRules(cfg)
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return rules.Table(), nil
}

// ShareBudget returns the sessions the classes without a reservation may
// hold, out of capacity with reserved sessions reserved, before each of
// their networks is held to a fair share (limiter.ShareBudget); 0 with an
// unknown capacity. sluice check prints it.
func ShareBudget(capacity, reserved int64) int64 { return limiter.ShareBudget(capacity, reserved, 0) }
