package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"sluice/internal/hostmask"
)

// ordered is one entry of a first-match-wins list (a class, a throttle
// policy) as OrderWarnings sees it.
type ordered struct {
	name  string
	masks []hostmask.Mask
	where string // "file:line"
	file  string // the file that placed it (ClassSpec.File)
}

// shadowing is a mask of an entry that an earlier entry's mask covers.
type shadowing struct {
	mask, by hostmask.Mask
	at       int // the earlier entry
}

// shadowed returns the masks of list[j] that a mask of an earlier entry
// covers (hostmask.Mask.Covers), each with the first such entry: in a
// first-match list those masks never decide.
func shadowed(list []ordered, j int) []shadowing {
	var out []shadowing
	for _, n := range list[j].masks {
	earlier:
		for i := range j {
			for _, m := range list[i].masks {
				if m.Covers(n) {
					out = append(out, shadowing{mask: n, by: m, at: i})
					break earlier
				}
			}
		}
	}
	return out
}

// OrderWarnings are the classes and throttle policies whose masks can
// never match because an earlier entry's mask matches every peer (or
// key) they do, the first match winning: a class wholly shadowed, or
// partly (a class an include_dir file adds lands after every class of
// the main file, so its network inside the main file's 127.0.0.0/8 goes
// to that class). Each names both entries, the masks, and how to order
// them. Only provable cases are warned of (hostmask.Mask.Covers): a mask
// that several earlier masks cover only together is not. Policy rules
// are not first-match (every rule that matches counts), so an earlier
// rule hides none.
func (c *Config) OrderWarnings() []string {
	specs, errs := c.ClassTable()
	if len(errs) > 0 {
		return nil
	}
	classes := make([]ordered, len(specs))
	for i, s := range specs {
		classes[i] = ordered{name: s.Name, masks: s.Masks, where: s.Where, file: s.File}
	}
	out := c.orderWarnings("class", classes, c.classAdvice)
	if !c.Throttle.Enabled {
		return out
	}
	policies := make([]ordered, len(c.Throttle.Policies))
	for i, p := range c.Throttle.Policies {
		path := fmt.Sprintf("throttle.policy[%d]", i+1)
		policies[i] = ordered{name: p.Name, where: c.where(path), file: c.definedIn(path)}
		for _, s := range p.Match {
			if m, err := hostmask.Parse(s); err == nil {
				policies[i].masks = append(policies[i].masks, m)
			}
		}
	}
	return append(out, c.orderWarnings("throttle.policy", policies, c.policyAdvice)...)
}

// orderWarnings words the shadowed masks of each entry of list; kind is
// "class" or "throttle.policy", advice says how to put entry j before
// entry i.
func (c *Config) orderWarnings(kind string, list []ordered, advice func(list []ordered, j, i int) string) []string {
	var out []string
	noun, what := "class", "peers"
	if kind != "class" {
		noun, what = "policy", "keys"
	}
	for j, e := range list {
		sh := shadowed(list, j)
		if len(sh) == 0 {
			continue
		}
		var by, masks []string
		first := sh[0].at
		for _, s := range sh {
			b := list[s.at]
			by = append(by, fmt.Sprintf("%s inside %q's %s at %s", s.mask, b.name, s.by, b.where))
			masks = append(masks, s.mask.String())
			first = min(first, s.at)
		}
		head := fmt.Sprintf("%s %q (%s) never matches: an earlier %s matches every one of its %s first", kind, e.name, e.where, noun, what)
		if len(sh) < len(e.masks) {
			head = fmt.Sprintf("%s %q (%s): its %s %s never %s: an earlier %s matches those %s first",
				kind, e.name, e.where, plural(len(masks), "mask", "masks"), strings.Join(masks, ", "), plural(len(masks), "matches", "match"), noun, what)
		}
		out = append(out, fmt.Sprintf("%s (%s), and the first %s that matches wins; %s", head, strings.Join(by, "; "), noun, advice(list, j, first)))
	}
	return out
}

func plural(n int, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

// included reports whether file is one of include_dir's.
func (c *Config) included(file string) bool { return slices.Contains(c.Included, file) }

// classAdvice says how to have class j tried before class i.
func (c *Config) classAdvice(list []ordered, j, i int) string {
	b, a := list[j], list[i]
	catchAll := list[len(list)-1].name
	switch {
	case j == len(list)-1:
		return fmt.Sprintf("the catch-all class stays last: narrow %q, which takes every peer before it", a.name)
	case c.ClassesFile != "" && b.file == c.Relative(c.ClassesFile) && a.file == b.file:
		return fmt.Sprintf("to have it tried first, move its line above %q's in %s", a.name, b.file)
	case c.ClassesFile != "" && b.file == c.Relative(c.ClassesFile):
		return fmt.Sprintf("classes_file's classes come after every [[class]]: to have it tried before %q, make it a [[class]] above %q, or narrow %q", a.name, a.name, a.name)
	case c.included(b.file) && a.file == b.file:
		return fmt.Sprintf("to have it tried first, move it above %q in %s", a.name, b.file)
	case c.included(b.file) && c.included(a.file):
		return fmt.Sprintf("include_dir's files are merged in name order, each new class going just before the catch-all %q: to have it tried before %q, give %s a name that sorts before %s, or narrow %q",
			catchAll, a.name, filepath.Base(b.file), filepath.Base(a.file), a.name)
	case c.included(b.file):
		return fmt.Sprintf("a class that an include_dir file adds goes after the main file's classes, just before the catch-all %q: to have it tried before %q, define class %q in %s above %q (the include_dir file then changes it in place), or narrow %q",
			catchAll, a.name, b.name, c.File, a.name, a.name)
	}
	return fmt.Sprintf("to have it tried first, move it above %q, or narrow %q", a.name, a.name)
}

// policyAdvice says how to have throttle policy j tried before policy i.
func (c *Config) policyAdvice(list []ordered, j, i int) string {
	b, a := list[j], list[i]
	switch {
	case c.included(b.file) && a.file == b.file:
		return fmt.Sprintf("to have it tried first, move it above %q in %s", a.name, b.file)
	case c.included(b.file) && c.included(a.file):
		return fmt.Sprintf("include_dir's files are merged in name order, each new policy going after those before it: to have it tried before %q, give %s a name that sorts before %s, or narrow %q",
			a.name, filepath.Base(b.file), filepath.Base(a.file), a.name)
	case c.included(b.file):
		return fmt.Sprintf("a policy that an include_dir file adds goes after the main file's policies: to have it tried before %q, define policy %q in %s above %q (the include_dir file then changes it in place), or narrow %q",
			a.name, b.name, c.File, a.name, a.name)
	}
	return fmt.Sprintf("to have it tried first, move it above %q, or narrow %q", a.name, a.name)
}
