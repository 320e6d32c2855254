package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"sluice/internal/app"
	"sluice/internal/config"
	"sluice/internal/postconf"
)

// printCapacity explains the MTA's capacity check found, and from where,
// the budget past which the classes without a reservation are held to
// fair shares, and the reservations that divide it.
func printCapacity(w io.Writer, cfg *config.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := postconf.MTACapacity(ctx, cfg)
	reserved := cfg.Reserved()
	switch {
	case err != nil:
		fmt.Fprintf(w, "MTA capacity: cannot be read: %v\n", err)
	case c.Sessions == 0:
		fmt.Fprintln(w, "MTA capacity: unknown (set [mta] sessions, mta.sendmail_cf to read Sendmail's MaxDaemonChildren, or anvil.postfix_config_dir to read Postfix's master.cf)")
	default:
		fmt.Fprintf(w, "MTA capacity: %d SMTP sessions (from %s)\n", c.Sessions, c.From)
	}
	if err == nil && c.Sessions > reserved {
		fmt.Fprintf(w, "fair share: past %d sessions of the classes without a reservation, each /24 or /48 is held to a max-min share of them\n",
			app.ShareBudget(c.Sessions, reserved))
	}
	if reserved == 0 {
		return
	}
	fmt.Fprintf(w, "reservations: %d sessions", reserved)
	for _, cl := range cfg.Classes {
		if cl.Reserve > 0 {
			fmt.Fprintf(w, " · %s %d", cl.Name, cl.Reserve)
		}
	}
	switch {
	case c.Sessions == 0:
		fmt.Fprintln(w, "; NOT ENFORCED while the capacity is unknown")
	case reserved >= c.Sessions:
		fmt.Fprintf(w, "; ALL of the %d sessions or more: the other classes get none\n", c.Sessions)
	default:
		fmt.Fprintf(w, "; the other classes share at most %d\n", c.Sessions-reserved)
	}
}

// capacityWarnings are check's and serve's warnings about reservations
// the MTA's capacity cannot honour.
func capacityWarnings(ctx context.Context, cfg *config.Config) []string {
	reserved := cfg.Reserved()
	if reserved == 0 {
		return nil
	}
	c, err := postconf.MTACapacity(ctx, cfg)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("the classes reserve %d sessions, but the MTA's capacity cannot be read (%v): reservations are not enforced; set [mta] sessions", reserved, err)}
	case c.Sessions == 0:
		return []string{fmt.Sprintf("the classes reserve %d sessions, but the MTA's capacity is unknown: reservations are not enforced; set [mta] sessions, mta.sendmail_cf or anvil.postfix_config_dir", reserved)}
	case reserved >= c.Sessions:
		return []string{fmt.Sprintf("the classes reserve %d sessions of the MTA's %d (from %s): the other classes get none; lower the reserves", reserved, c.Sessions, c.From)}
	}
	return nil
}

// printEscalation says what [mta.escalate] does: off, or which refusals
// escalate, for how long, through which helper, and whether it answers.
func printEscalation(w io.Writer, cfg *config.Config) {
	e := cfg.MTA.Escalate
	if e.Socket == "" {
		fmt.Fprintln(w, "escalation: off ([mta.escalate] socket not set)")
		return
	}
	var spared []string
	for _, cl := range cfg.Classes {
		if cl.Reserve > 0 {
			spared = append(spared, cl.Name)
		}
	}
	fmt.Fprintf(w, "escalation: an address refused %d sessions within %s is dropped by the kernel for %s, through sluice escalate-helper on %s",
		e.After, e.Within.D(), e.For.D(), e.Socket)
	if len(spared) > 0 {
		fmt.Fprintf(w, "; never a class with a reservation: %s", strings.Join(spared, ", "))
	}
	fmt.Fprintf(w, "\n  the helper's table: inet %s, TCP ports %v, at most %d addresses a family, each for at most %s\n", e.Table, e.Ports, e.Size, e.MaxFor.D())
	if fi, err := os.Stat(e.Socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		fmt.Fprintf(w, "  no helper's socket at %s: escalations fail, and sessions are refused as without them, until it runs\n", e.Socket)
	}
}
