package app

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/limittable"
)

// ruleChange is one line of what a reload changed among the named parts
// of the configuration ([[class]], [[policy.rule]], [[throttle.policy]]).
type ruleChange struct {
	table, name string // "class", "local"
	setting     string // "refuse"; "" when the whole part was added or removed
	old, cur    string // the values as written; "" for an added or removed part
}

// ruleChanges lists, part by part in the new file's order (then the
// removed ones), what differs between old and cur: a part added or
// removed, or each setting of a part that changed, old -> new.
func ruleChanges(old, cur *config.Config) []ruleChange {
	var out []ruleChange
	out = append(out, namedChanges("class", old.Classes, cur.Classes, func(c config.Class) string { return c.Name })...)
	out = append(out, namedChanges("policy.rule", old.Policy.Rules, cur.Policy.Rules, func(r config.PolicyRule) string { return r.Name })...)
	out = append(out, namedChanges("throttle.policy", old.Throttle.Policies, cur.Throttle.Policies, func(p config.ThrottlePolicy) string { return p.Name })...)
	return out
}

func namedChanges[T any](table string, old, cur []T, name func(T) string) []ruleChange {
	was := map[string]T{}
	for _, o := range old {
		was[name(o)] = o
	}
	var out []ruleChange
	seen := map[string]bool{}
	for _, c := range cur {
		n := name(c)
		seen[n] = true
		o, ok := was[n]
		if !ok {
			out = append(out, ruleChange{table: table, name: n})
			continue
		}
		diffValues(reflect.ValueOf(o), reflect.ValueOf(c), func(key, a, b string) {
			out = append(out, ruleChange{table: table, name: n, setting: key, old: a, cur: b})
		})
	}
	for _, o := range old {
		if n := name(o); !seen[n] {
			out = append(out, ruleChange{table: table, name: n, old: "removed"})
		}
	}
	return out
}

// diffValues calls changed with the key and both values of every setting
// of a and b (values of one struct type) that differs, but their name.
func diffValues(a, b reflect.Value, changed func(key, old, cur string)) {
	config.Diff(a, b, "", func(key string) bool { return key == "name" }, func(key string, av, bv reflect.Value) {
		changed(key, settingText(av), settingText(bv))
	})
}

// settingText writes a setting's value as the file would.
func settingText(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "(unset)"
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case config.Duration:
		return time.Duration(x).String()
	case string:
		return fmt.Sprintf("%q", x)
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = settingText(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

// tableChange is what a reload changed in a rule's per-key limit table
// (the table was read again, whether or not the config file changed).
type tableChange struct {
	rule, file               string
	entries                  int // in the new table
	added, removed, modified int
}

// tableChanges lists, for each policy rule of cur with a table, or of old
// with one, the entries added, removed and changed since old (a rule that
// is new, or a table newly named, counts every entry as added). Rules
// whose table did not change are left out.
func tableChanges(old, cur *config.Config) []tableChange {
	oldSpecs, _ := old.PolicyRules()
	curSpecs, _ := cur.PolicyRules()
	was := map[string]*limittable.Table{}
	for _, s := range oldSpecs {
		was[s.Name] = s.Table
	}
	var out []tableChange
	for _, s := range curSpecs {
		o := was[s.Name]
		if s.Table == nil && o == nil {
			continue
		}
		c := tableChange{rule: s.Name}
		if s.Table != nil {
			c.file, c.entries = s.Table.Name(), s.Table.Len()
		}
		c.added, c.removed, c.modified = limittable.Changes(o, s.Table)
		if c.added+c.removed+c.modified > 0 {
			out = append(out, c)
		}
	}
	return out
}

// logRuleChanges logs one line per change a reload makes to the rules,
// and one per per-key table whose entries changed.
func (d *Daemon) logRuleChanges(old, cur *config.Config) {
	for _, c := range ruleChanges(old, cur) {
		switch {
		case c.setting != "":
			d.log.Info("reload: "+c.table+" changed", "name", c.name, "setting", c.setting, "old", c.old, "new", c.cur)
		case c.old == "removed":
			d.log.Info("reload: "+c.table+" removed", "name", c.name)
		default:
			d.log.Info("reload: "+c.table+" added", "name", c.name)
		}
	}
	for _, c := range tableChanges(old, cur) {
		d.log.Info("reload: policy.rule table changed", "name", c.rule, "table", c.file, "entries", c.entries,
			"entries_changed", c.added+c.removed+c.modified, "added", c.added, "removed", c.removed, "changed", c.modified)
	}
}
