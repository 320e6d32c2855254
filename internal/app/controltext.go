package app

import (
	"fmt"
	"strings"
	"time"

	"sluice/internal/governor"
	"sluice/internal/status"
)

// The control commands' answers as people read them (-json gives the
// results themselves). Every string in them goes through status.Safe,
// as `sluice status` prints: keys are senders, recipients and HELO names
// that remote SMTP clients chose, and ban reasons are a relay's words; a
// control character in one must not reach the administrator's terminal
// nor begin a line of its own. (sluice prints the text through Safe
// again, line by line.)

func stepsText(steps []governor.RuleStep, none string) string {
	if len(steps) == 0 {
		return none + "\n"
	}
	var b strings.Builder
	for _, s := range steps {
		stepText(&b, s)
	}
	return b.String()
}

func stepText(b *strings.Builder, s governor.RuleStep) {
	b.WriteString(status.Safe(s.Rule))
	if s.Key != "" {
		fmt.Fprintf(b, " [%s]", status.Safe(s.Key))
	}
	if s.Outcome != "" {
		fmt.Fprintf(b, ": %s", status.Safe(s.Outcome))
	}
	if s.N > 0 {
		fmt.Fprintf(b, " (this request adds %d)", s.N)
	}
	b.WriteByte('\n')
	for _, l := range s.Limits {
		fmt.Fprintf(b, "    %-18s count %d, remaining %d", status.Safe(l.Limit), l.Count, l.Remaining)
		if l.Over {
			fmt.Fprintf(b, ", OVER: admitted again in %s", status.Safe(l.RetryAfter))
		}
		if l.Reset != "" {
			fmt.Fprintf(b, ", empty in %s", status.Safe(l.Reset))
		}
		b.WriteByte('\n')
	}
	if s.Exemption != nil {
		fmt.Fprintf(b, "    exemption: %s\n", exemptionText(*s.Exemption))
	}
}

func explainText(ex governor.Explanation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "answer: %s\n", status.Safe(ex.Answer))
	for i, s := range ex.Rules {
		fmt.Fprintf(&b, "%d. ", i+1)
		stepText(&b, s)
	}
	return b.String()
}

func exemptionText(x governor.Exemption) string {
	s := fmt.Sprintf("rule %s, key %s: ", status.Safe(x.Rule), status.Safe(x.Key))
	if x.Through {
		s += "let through uncounted"
	} else {
		s += fmt.Sprintf("limits raised by %d", x.Raise)
	}
	if x.Until.IsZero() {
		return s + ", until removed"
	}
	return s + ", until " + x.Until.UTC().Format(time.RFC3339)
}

func exemptText(list []governor.Exemption) string {
	if len(list) == 0 {
		return "no exemptions\n"
	}
	var b strings.Builder
	for _, x := range list {
		b.WriteString(exemptionText(x) + "\n")
	}
	return b.String()
}

func throttleText(states []throttleKeyView) string {
	if len(states) == 0 {
		return "no throttle keys\n"
	}
	var b strings.Builder
	for _, s := range states {
		limit := s.Limit
		if s.Limit != s.Configured {
			limit += ", learned; configured " + s.Configured
		}
		fmt.Fprintf(&b, "%s %s [%s]: %d sending, %d waiting, %d booked, next slot %s",
			status.Safe(s.Policy), status.Safe(s.Bucket), status.Safe(limit), s.Sending, s.Waiting, s.Booked, s.NextSlot.UTC().Format(time.RFC3339))
		if !s.SuspendedUntil.IsZero() {
			fmt.Fprintf(&b, ", SUSPENDED until %s (%s)", s.SuspendedUntil.UTC().Format(time.RFC3339), status.Safe(s.Reason))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
