package app

import (
	"sluice/internal/config"
	"sluice/internal/metrics"
)

// metricParts are the series that mean something in sluice serve with
// cfg: decisions, classes, the store and reloads always; the throttle's
// only when its door is open (a change of throttle.enabled needs a
// restart). The pool's shape registers itself once a multiplexor's pool
// is read at web.mux_socket; its kills and busy timeouts are seen only
// inside the multiplexor and never served here.
func metricParts(cfg *config.Config) metrics.Part {
	p := metrics.PartDecisions | metrics.PartClasses | metrics.PartStore | metrics.PartConfig
	if cfg.Throttle.Enabled {
		p |= metrics.PartThrottle
	}
	return p
}
