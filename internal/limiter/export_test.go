package limiter

// Direction is which way a session goes.
type Direction uint8

// Session directions.
const (
	Incoming Direction = iota + 1
	Outgoing
)

// Cap returns the class's cap for sessions going dir (0: none).
func (c *Class) Cap(dir Direction) int64 {
	if dir == Outgoing {
		return c.Queue
	}
	return c.Refuse
}

// Peaks returns the peak figures since the last report.
func (l *Limiter) Peaks() *Peaks { return &l.peaks }

// get returns the peak.
func (c *peakCell) get() Peak {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

// Snapshot returns the current peaks (figures with a non-zero value).
func (ps *Peaks) Snapshot() []Peak {
	var out []Peak
	ps.each(func(c *peakCell) {
		if p := c.get(); p.Value > 0 {
			out = append(out, p)
		}
	})
	return out
}
