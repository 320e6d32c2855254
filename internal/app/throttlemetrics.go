package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/metrics"
)

// banCollector exports, at each scrape, the throttle keys a relay's ban
// changed (the marks: few keys, each with a state), so their series come
// and go with them:
//
//	sluice_throttle_key_suspended_seconds{key}  time left of the suspension
//	sluice_throttle_key_bans{key}               bans in a row
//	sluice_throttle_key_limit{key}              the learned limit
type banCollector struct{ d *Daemon }

var (
	banSuspendedDesc = prometheus.NewDesc(metrics.Namespace+"_throttle_key_suspended_seconds",
		"Time left of a throttle key's suspension after the relay banned it.", []string{"key"}, nil)
	banBansDesc = prometheus.NewDesc(metrics.Namespace+"_throttle_key_bans",
		"Bans in a row of a throttle key (its cool-off doubles with each).", []string{"key"}, nil)
	banLimitDesc = prometheus.NewDesc(metrics.Namespace+"_throttle_key_limit",
		"The learned limit of a throttle key (sends per its policy's period), below the configured one.", []string{"key"}, nil)
)

// maxBanSeries caps the keys exported at one scrape.
const maxBanSeries = metrics.MaxSeries

func (c banCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- banSuspendedDesc
	ch <- banBansDesc
	ch <- banLimitDesc
}

func (c banCollector) Collect(ch chan<- prometheus.Metric) {
	if c.d.throttleBan == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys, err := c.d.throttleBan.states(ctx, c.d.cfg.Load())
	if err != nil {
		return
	}
	now := time.Now()
	for i, k := range keys {
		if i == maxBanSeries {
			break
		}
		if left := k.SuspendedUntil.Sub(now); left > 0 {
			ch <- prometheus.MustNewConstMetric(banSuspendedDesc, prometheus.GaugeValue, left.Seconds(), k.Key)
		}
		if k.Bans > 0 {
			ch <- prometheus.MustNewConstMetric(banBansDesc, prometheus.GaugeValue, float64(k.Bans), k.Key)
		}
		if k.Limit > 0 {
			ch <- prometheus.MustNewConstMetric(banLimitDesc, prometheus.GaugeValue, float64(k.Limit), k.Key)
		}
	}
}
