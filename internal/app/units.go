package app

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"sluice/internal/config"
	"sluice/internal/safefs"
	"sluice/internal/sdlisten"
)

// CheckSocketUnits checks systemd socket unit files against cfg by the
// rule the start applies to the sockets systemd passes: every
// ListenStream= must be a listen address of a door the configuration
// turns on, or serve refuses to start (its clients would wait on the
// socket for ever). A unit file that does not exist is skipped, as
// systemd skips a unit in Sockets= that is not installed; its name is
// returned in skipped. Errors name the file and line.
func CheckSocketUnits(cfg *config.Config, files []string) (skipped []string, errs []error) {
	ls, skipped, errs := readSocketUnits(files)
	for _, l := range ls {
		if door := namedBy(cfg, l.UnitListen); door == "" {
			errs = append(errs, fmt.Errorf("%s:%d: ListenStream=%s is no listen address of a door this configuration turns on: sluice serve would refuse the socket and not start (turn its door on with the address in its listen list, or remove the line)", l.file, l.Line, l.Value))
		}
	}
	return skipped, errs
}

// fileListen is a ListenStream= of a socket unit file.
type fileListen struct {
	sdlisten.UnitListen
	file string
}

// readSocketUnits reads the ListenStream= lines of socket unit files; a
// file that does not exist is skipped.
func readSocketUnits(files []string) (ls []fileListen, skipped []string, errs []error) {
	for _, f := range files {
		b, err := safefs.ReadTrusted(f, sdlisten.MaxUnitFile)
		if errors.Is(err, fs.ErrNotExist) {
			skipped = append(skipped, f)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("socket unit %s: %w", f, err))
			continue
		}
		units, err := sdlisten.ParseSocketUnit(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		for _, u := range units {
			ls = append(ls, fileListen{u, f})
		}
	}
	return ls, skipped, errs
}

// CheckSocketDirs checks that the start can make every unix socket that
// no socket unit of socketUnits passes (config.CheckSocketDirs): as the
// service unit's User= under its ProtectSystem= and ReadWritePaths= when
// serviceUnit is set ("" for none: as the user running the check).
func CheckSocketDirs(cfg *config.Config, socketUnits []string, serviceUnit string) []error {
	ls, _, errs := readSocketUnits(socketUnits)
	d := config.Deployment{Passed: func(path string) bool {
		return slices.ContainsFunc(ls, func(l fileListen) bool { return l.Names("unix", path) })
	}}
	if serviceUnit != "" {
		b, err := safefs.ReadTrusted(serviceUnit, sdlisten.MaxUnitFile)
		if err != nil {
			return append(errs, fmt.Errorf("service unit %s: %w", serviceUnit, err))
		}
		u, err := sdlisten.ParseServiceUnit(b)
		if err != nil {
			return append(errs, fmt.Errorf("%s: %w", serviceUnit, err))
		}
		d.RunAs, d.CanWrite, d.Made, d.Unit = u.User, u.CanWrite, u.Makes, serviceUnit
		if d.RunAs == "" {
			d.RunAs = "root"
		}
	}
	return append(errs, cfg.CheckSocketDirs(d)...)
}

// namedBy returns the door whose listen list names the unit's socket, or "".
func namedBy(cfg *config.Config, l sdlisten.UnitListen) string {
	for _, fe := range (&Daemon{}).frontEnds(cfg) {
		if !fe.on {
			continue
		}
		for _, spec := range fe.listen {
			network, addr, err := config.ParseListen(spec)
			if err != nil {
				continue
			}
			if network == "unix" {
				addr = cfg.Path(addr)
			}
			if l.Names(network, addr) {
				return fe.name
			}
		}
	}
	return ""
}
