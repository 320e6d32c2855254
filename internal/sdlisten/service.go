package sdlisten

import (
	"fmt"
	"path"
	"strings"
)

// ServiceUnit is what `sluice check -service-unit` reads of the service
// unit that runs sluice: who it runs as and which paths it may write
// (systemd.exec(5)).
type ServiceUnit struct {
	User string // User= ("" for root)
	// ProtectSystem is ProtectSystem= as written ("", "yes", "full",
	// "strict"; "no" and "false" read as "").
	ProtectSystem string
	// Writable are the paths ProtectSystem= leaves writable: ReadWritePaths=,
	// and /run, /var/lib, /var/cache and /var/log below which systemd makes
	// RuntimeDirectory=, StateDirectory=, CacheDirectory= and LogsDirectory=,
	// and /tmp and /var/tmp with PrivateTmp=.
	Writable []string
	// ReadOnly are ReadOnlyPaths= and InaccessiblePaths=.
	ReadOnly []string
	// Made are the directories systemd makes for the service, owned by
	// its User=: RuntimeDirectory=, StateDirectory=, CacheDirectory= and
	// LogsDirectory= (in Writable too).
	Made []string
}

// maxUnitPaths bounds the paths one unit may list.
const maxUnitPaths = 1024

// ParseServiceUnit reads the [Service] settings of ServiceUnit from a
// unit file. A relative path, or a value with a NUL byte, is an error
// naming its line; an empty assignment resets a list, as in systemd.
func ParseServiceUnit(b []byte) (ServiceUnit, error) {
	var u ServiceUnit
	dirs := map[string]string{"RuntimeDirectory": "/run", "StateDirectory": "/var/lib", "CacheDirectory": "/var/cache", "LogsDirectory": "/var/log"}
	err := scanSection(b, "[Service]", func(n int, key, val string) error {
		if strings.ContainsRune(val, 0) {
			return fmt.Errorf("line %d: %s= holds a NUL byte", n, key)
		}
		switch key {
		case "User":
			u.User = val
		case "PrivateTmp":
			if val == "yes" || val == "true" || val == "1" || val == "on" {
				return addPaths(&u.Writable, n, key, "/tmp /var/tmp", "")
			}
		case "ProtectSystem":
			switch val {
			case "no", "false", "0", "off":
				val = ""
			case "yes", "true", "1", "on", "full", "strict", "":
			default:
				return fmt.Errorf("line %d: ProtectSystem=%s is none of yes, full, strict or no", n, val)
			}
			u.ProtectSystem = val
		case "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths":
			list := &u.Writable
			if key != "ReadWritePaths" {
				list = &u.ReadOnly
			}
			return addPaths(list, n, key, val, "")
		default:
			if base, ok := dirs[key]; ok {
				if err := addPaths(&u.Made, n, key, val, base); err != nil {
					return err
				}
				return addPaths(&u.Writable, n, key, val, base)
			}
		}
		return nil
	})
	return u, err
}

// addPaths appends the space-separated paths of val (without systemd's
// "-" and "+" prefixes, relative to base when it is set) to list.
func addPaths(list *[]string, n int, key, val, base string) error {
	for _, p := range strings.Fields(val) {
		p = strings.TrimLeft(p, "-+")
		if base != "" {
			p, _, _ = strings.Cut(p, ":") // "name:link" (systemd 250): the name
			p = path.Join(base, p)
		}
		if !path.IsAbs(p) {
			return fmt.Errorf("line %d: %s=%s: %q is not an absolute path", n, key, val, p)
		}
		if len(*list) >= maxUnitPaths {
			return fmt.Errorf("line %d: more than %d paths", n, maxUnitPaths)
		}
		*list = append(*list, path.Clean(p))
	}
	return nil
}

// Makes reports whether dir is, or is below, a directory systemd makes
// for the service (see Made).
func (u ServiceUnit) Makes(dir string) bool { return under(path.Clean(dir), u.Made) != "" }

// under returns the longest path of list that is dir or holds it.
func under(dir string, list []string) string {
	best := ""
	for _, p := range list {
		if (dir == p || strings.HasPrefix(dir, strings.TrimSuffix(p, "/")+"/")) && len(p) > len(best) {
			best = p
		}
	}
	return best
}

// CanWrite reports whether the unit's mount namespace lets the service
// write in dir: false under a ProtectSystem= that makes dir read-only,
// unless a writable path holds it, and false below ReadOnlyPaths=.
func (u ServiceUnit) CanWrite(dir string) bool {
	dir = path.Clean(dir)
	rw, ro := under(dir, u.Writable), under(dir, u.ReadOnly)
	if ro != "" && len(ro) >= len(rw) {
		return false
	}
	if rw != "" {
		return true
	}
	var readOnly []string
	switch u.ProtectSystem {
	case "strict":
		readOnly = []string{"/"}
		for _, w := range []string{"/dev", "/proc", "/sys"} {
			if under(dir, []string{w}) != "" {
				return true
			}
		}
	case "full":
		readOnly = []string{"/usr", "/boot", "/efi", "/etc"}
	case "yes", "true", "1", "on", "":
		if u.ProtectSystem != "" {
			readOnly = []string{"/usr", "/boot", "/efi"}
		}
	}
	return under(dir, readOnly) == ""
}
