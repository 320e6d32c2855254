package cli

import (
	"os"
	"path/filepath"
)

// privateDefaults gives the package's tests default directories of their
// own; TestMain calls it before the tests and the function it returns
// after. STATE_DIRECTORY and RUNTIME_DIRECTORY (systemd's, which
// config.DefaultStateDir and config.DefaultRuntimeDir take before
// anything else) point into a directory of this test binary, so that
// `sluice serve`, `status` or `throttle` run without a path, in this
// process or in a child that inherits its environment, never reads or
// writes the host's /var/lib/sluice and /run/sluice nor reaches a daemon
// serving there: an installed sluice, as scripts/test.sh sets up as root
// (scripts/installed-host.sh). A test that gives a child an environment
// of its own sets the variables itself (TestStatusOutOfTheBox).
func privateDefaults() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-cli-defaults")
	if err != nil {
		return nil, err
	}
	for name, sub := range map[string]string{"STATE_DIRECTORY": "state", "RUNTIME_DIRECTORY": "run"} {
		if err := os.Setenv(name, filepath.Join(dir, sub)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return func() { os.RemoveAll(dir) }, nil
}
