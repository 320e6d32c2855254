package governor

import (
	"strconv"
	"strings"
)

// StoreKeyText renders a store key for people, in the words of the
// configuration that made it:
//
//	rule sender-rate: sender=a@b.example (limit 1)
//	anvil connections of smtp:192.0.2.1
//	anvil rates of smtp:192.0.2.1
//	class local
//	throttle relay-a, bucket relay.example: sessions | bookings
//
// A key of another shape has its parts joined by ", ".
func StoreKeyText(key string) string {
	parts := strings.Split(key, "\x00")
	switch {
	case parts[0] == "policy" && len(parts) >= 4 && strings.HasPrefix(parts[1], "{") && strings.HasSuffix(parts[len(parts)-2], "}"):
		name := strings.TrimPrefix(parts[1], "{")
		attrs := parts[2 : len(parts)-1]
		attrs[len(attrs)-1] = strings.TrimSuffix(attrs[len(attrs)-1], "}")
		text := "rule " + name + ": " + strings.Join(attrs, ", ")
		if j, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
			text += " (limit " + strconv.Itoa(j+1) + ")"
		}
		return text
	case parts[0] == "anvil" && len(parts) == 3 && parts[1] == "c":
		return "anvil connections of " + parts[2]
	case parts[0] == "anvil" && len(parts) == 3 && parts[1] == "r":
		return "anvil rates of " + parts[2]
	case parts[0] == "class" && len(parts) == 2:
		return "class " + parts[1]
	case parts[0] == "throttle" && len(parts) == 4 && (parts[1] == "c" || parts[1] == "r"):
		what := "sessions"
		if parts[1] == "r" {
			what = "bookings"
		}
		return "throttle " + parts[2] + ", bucket " + parts[3] + ": " + what
	}
	return strings.Join(parts, ", ")
}
