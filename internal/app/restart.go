package app

import (
	"reflect"
	"strings"

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
}

// restartNotes explains settings that a reload applies only in part.
var restartNotes = map[string]string{
	"milter.policy_rules": "milter.policy_rules (the steps the MTA is asked for are negotiated per session; new sessions get the new rules, but the steps change only after a restart)",
}

// restartNeeded names the settings that changed from old to cur and that
// a reload cannot apply, in the order of the configuration's fields.
func restartNeeded(old, cur *config.Config) []string {
	var out []string
	diffSettings(reflect.ValueOf(*old), reflect.ValueOf(*cur), "", func(key string) {
		if note, ok := restartNotes[key]; ok {
			key = note
		}
		out = append(out, key)
	})
	return out
}

// diffSettings calls changed with the key of every setting under a and b
// (values of one struct type) that differs and is not reloadable. It
// descends into tables (structs) and compares everything else whole;
// fields without a TOML key (toml:"-", unexported) are not settings.
func diffSettings(a, b reflect.Value, prefix string, changed func(key string)) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name // the decoder matches the field's name
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if reloadable[key] {
			continue
		}
		av, bv := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct {
			diffSettings(av, bv, key, changed)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			changed(key)
		}
	}
}
