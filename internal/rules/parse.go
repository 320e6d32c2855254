package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parsePeriod reads a Go duration, a bare number of seconds, or a whole
// number of days ("1d").
func parsePeriod(per string) (time.Duration, error) {
	if per != "" && strings.Trim(per, "0123456789") == "" {
		per += "s"
	}
	if days, ok := strings.CutSuffix(per, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.ParseInt(days, 10, 32)
		if err != nil || n > 36500 {
			return 0, fmt.Errorf("%q: too many days", per)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(per)
}

// ParseLimit parses "N/PERIOD [ALGORITHM] [burst=B]", for example
// "10/60s exact", "100/1h smooth burst=20", "30/1m" or "500/1d". Without an
// algorithm the limit is exact, the one that never lets more than N
// through in any window. The result is validated.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Limit{}, fmt.Errorf("empty limit (want e.g. \"10/60s exact\")")
	}
	n, per, ok := strings.Cut(fields[0], "/")
	if !ok {
		return Limit{}, fmt.Errorf("limit %q: want N/PERIOD, e.g. \"10/60s\"", s)
	}
	count, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: %q is not a number", s, n)
	}
	period, err := parsePeriod(per)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: %q is not a duration (e.g. 60s, 10m, 1h, 1d)", s, per)
	}
	l := Limit{Algorithm: Exact, N: count, Period: period}
	for _, f := range fields[1:] {
		if b, ok := strings.CutPrefix(f, "burst="); ok {
			v, err := strconv.ParseInt(b, 10, 64)
			if err != nil {
				return Limit{}, fmt.Errorf("limit %q: burst %q is not a number", s, b)
			}
			l.Burst = v
			continue
		}
		a, err := ParseAlgorithm(f)
		if err != nil {
			return Limit{}, fmt.Errorf("limit %q: %v", s, err)
		}
		l.Algorithm = a
	}
	if l.Burst != 0 && l.Algorithm != Smooth {
		return Limit{}, fmt.Errorf("limit %q: burst applies to smooth limits only", s)
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	if l.Burst == l.N {
		l.Burst = 0 // "burst=N" is the default spelled out: one value for one meaning
	}
	return l, nil
}
