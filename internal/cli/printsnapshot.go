package cli

import (
	"fmt"
	"io"

	"sluice/internal/config"
)

// printSnapshot shows where the memory store's counts are kept across
// restarts.
func printSnapshot(w io.Writer, cfg *config.Config) {
	sn := cfg.Store.Snapshot
	if !sn.Enabled {
		fmt.Fprintln(w, "counts across restarts: not kept (store.snapshot.enabled = false)")
		return
	}
	guard := "off"
	if sn.RestartGuard {
		guard = "on: after an unclean stop, exact limits grant nothing for one period"
	}
	fmt.Fprintf(w, "counts across restarts: %s, written every %s and at a graceful stop; throttle bookings appended to it as they are made; restart guard %s\n",
		cfg.StatePath(sn.File), sn.Interval.D(), guard)
}
