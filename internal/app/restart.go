package app

import (
	"reflect"

	"sluice/internal/config"
)

// reloadable lists the settings a reload applies, by their key in the
// file ("milter.refuse_text"; a table or array of tables covers what is
// under it): the rules, rebuilt into a new governor, the log level and
// what the status page reads at each request. Every other setting, and
// any setting added later, needs a restart: restartNeeded compares them
// all, so a new field is reported until it is listed here, which is a
// claim that reload applies it.
var reloadable = map[string]bool{
	"classes_file":          true, // read again by ClassTable
	"class":                 true,
	"log.level":             true, // Reload sets the level variable
	"anvil.rate_time_unit":  true,
	"anvil.smtpd":           true,
	"policy.default_action": true,
	"policy.rule":           true,
	"throttle.policy":       true,
	"milter.refuse_text":    true,
	"web.mux_socket":        true, // the status page reads it per request
	"mta.escalate.after":    true, // the escalator's settings, replaced
	"mta.escalate.within":   true,
	"mta.escalate.for":      true,
}

// restartNotes explains settings that a reload applies only in part.
var restartNotes = map[string]string{
	"mta.escalate.ports":   "mta.escalate.ports (sluice escalate-helper reads it when it starts: restart the helper)",
	"mta.escalate.size":    "mta.escalate.size (sluice escalate-helper reads it when it starts: restart the helper)",
	"mta.escalate.max_for": "mta.escalate.max_for (sluice escalate-helper reads it when it starts: restart the helper)",
	"milter.policy_rules":  "milter.policy_rules (the steps the MTA is asked for are negotiated per session; new sessions get the new rules, but the steps change only after a restart)",
}

// restartNeeded names the settings that changed from old to cur and that
// a reload cannot apply, in the order of the configuration's fields
// (config.Diff: the walk the reload's rule changes use too).
func restartNeeded(old, cur *config.Config) []string {
	var out []string
	skip := func(key string) bool { return reloadable[key] }
	config.Diff(reflect.ValueOf(*old), reflect.ValueOf(*cur), "", skip, func(key string, _, _ reflect.Value) {
		if note, ok := restartNotes[key]; ok {
			key = note
		}
		out = append(out, key)
	})
	return out
}
