package status

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Count writes n with thousands separators, as the status page's script
// does: 12,345.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Duration writes d as the status page's script does: "4s", "3m12s",
// "3m", "2h05m" or "3d4h" (whole seconds; negative is 0s).
func Duration(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	two := func(n int64) string {
		if n < 10 {
			return "0" + strconv.FormatInt(n, 10)
		}
		return strconv.FormatInt(n, 10)
	}
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		out := strconv.FormatInt(s/60, 10) + "m"
		if s%60 != 0 {
			out += two(s%60) + "s"
		}
		return out
	case s < 86400:
		return strconv.FormatInt(s/3600, 10) + "h" + two(s/60%60) + "m"
	}
	return strconv.FormatInt(s/86400, 10) + "d" + strconv.FormatInt(s%86400/3600, 10) + "h"
}

// Safe makes text a peer could have chosen (keys, senders, replies, tags)
// fit for a terminal, a table and a line of its own: every rune Printable
// rejects becomes '?' (C0 and C1 controls with ESC, CR, LF and tab, DEL,
// bidi overrides and other format characters, and each byte of invalid
// UTF-8). Every command that prints such text prints it through Safe.
func Safe(s string) string {
	ok := true
	for _, r := range s {
		if !Printable(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	return strings.Map(func(r rune) rune {
		if !Printable(r) {
			return '?'
		}
		return r
	}, s)
}

// Printable reports whether Safe keeps r: a graphic character or the
// space (unicode.IsPrint), and not utf8.RuneError (which is also what
// ranging over invalid UTF-8 yields).
func Printable(r rune) bool {
	return r != utf8.RuneError && unicode.IsPrint(r)
}

// EscalationText is the escalation on one line, as `sluice status` and
// the status page show it: "3 addresses dropped by the kernel · 40
// counted · 12 added, 0 failed" (", helper: ERROR" while its last
// request failed).
func EscalationText(e *Escalation) string {
	addrs := " addresses"
	if e.Dropping == 1 {
		addrs = " address"
	}
	t := Count(int64(e.Dropping)) + addrs + " dropped by the kernel · " + Count(int64(e.Tracked)) + " counted · " +
		Count(int64(e.Added)) + " added, " + Count(int64(e.Failed)) + " failed"
	if e.QueueFull > 0 {
		t += ", " + Count(int64(e.QueueFull)) + " lost to a full queue"
	}
	if e.Error != "" {
		t += ", helper: " + e.Error
	}
	return t
}

// MTAText is the MTA's sessions on one line, as `sluice status` and the
// status page show them: "37 open / 50 · 10 reserved, 3 unused · 10 free
// · 12 networks hold 30 of 32 unreserved" (", shedding: 4 per network"
// once they hold more than that budget; ", 40 busy networks" while some
// networks were refused a session or held more than one in the last
// minute).
func MTAText(m *MTA) string {
	t := Count(m.Open) + " open / "
	if m.Capacity > 0 {
		t += Count(m.Capacity)
	} else {
		t += "capacity unknown"
	}
	if m.Reserved > 0 {
		t += " · " + Count(m.Reserved) + " reserved, " + Count(m.ReservedUnused) + " unused"
	}
	if m.Capacity > 0 {
		t += " · " + Count(m.Free) + " free"
	}
	if sh := m.Share; sh != nil {
		t += " · " + Count(int64(sh.Networks)) + " networks hold " + Count(sh.Sessions) + " of " + Count(sh.Budget) + " unreserved"
		if sh.PerNet > 0 {
			t += ", shedding: " + Count(sh.PerNet) + " per network"
		}
		switch {
		case sh.Busy == 1:
			t += ", 1 busy network"
		case sh.Busy > 1:
			t += ", " + Count(int64(sh.Busy)) + " busy networks"
		}
	}
	return t
}
