package config

import (
	"errors"
	"sync"

	"sluice/internal/limittable"
	"sluice/internal/rules"
)

// tableCache keeps each limit table a Config names, read once: a table
// of a million lines is read once per load or reload, however often the
// rules are converted, and what Validate checked is what is used.
type tableCache struct {
	mu sync.Mutex
	m  map[string]tableRead
}

type tableRead struct {
	t    *limittable.Table
	errs []error
}

// limitTable reads the table at the config-relative path file for a rule
// that counts count (cached by both), and returns it or every bad line.
func (c *Config) limitTable(file string, count rules.Counted) (*limittable.Table, []error) {
	if c.tables == nil {
		// A Config not made by Default (a literal in a test): nothing to share.
		return limittable.ReadFile(c.Relative(file), limitCheck(count))
	}
	c.tables.mu.Lock()
	defer c.tables.mu.Unlock()
	key := c.Relative(file) + "\x00" + count.String()
	if r, ok := c.tables.m[key]; ok {
		return r.t, r.errs
	}
	t, errs := limittable.ReadFile(c.Relative(file), limitCheck(count))
	if c.tables.m == nil {
		c.tables.m = map[string]tableRead{}
	}
	c.tables.m[key] = tableRead{t, errs}
	return t, errs
}

// limitCheck vets a limit of a rule that counts count, in its limit list
// or in its table.
func limitCheck(count rules.Counted) limittable.Check {
	return func(l rules.Limit) error {
		if count == rules.CountBytes && l.Algorithm == rules.Exact {
			return errors.New("count bytes with a smooth or anvil limit; an exact log would keep one entry per byte")
		}
		return nil
	}
}
